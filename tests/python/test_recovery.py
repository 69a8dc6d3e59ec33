"""Preemption and recovery of python/train.py: SIGTERM makes a run checkpoint at the next step
boundary and exit 0 (taken by one watcher thread: every other thread blocks it), and
`--resume auto` continues from that step; a kill in the middle of a background checkpoint write
leaves the previous checkpoint intact and the resumed run reaches the unfaulted final loss; under
`python -m myriad.run`, a data-parallel job whose rank 1 is killed with SIGKILL mid-run is
restarted from its newest checkpoint and ends with exactly the final loss of an unfaulted run
(the data order is a function of the step, so no step's data is skipped or repeated)."""
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from tiny_corpus import write_corpus
from package_under_test import DRIVER, PYTHONPATH

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MPIRUN = shutil.which("mpirun")
ENV = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")

YAML = """\
model: {{architecture: gpt2, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 32, context_length: 32}}
training: {{micro_batch: 2, gradient_accumulation: 2, seq_len: 32, steps: 10, lr: 3.0e-3, \
eval_batches: 2, eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
checkpoint: {{every: 2}}
logging: {{measure_peak: false, dir: {run}, every: 1}}
sample: {{tokens: 0}}
"""

FINAL = re.compile(r"^Iteration: 10/10 \| Loss: ([0-9.]+) ", re.M)
FINAL_8 = re.compile(r"^Iteration: 8/8 \| Loss: ([0-9.]+) ", re.M)


@pytest.fixture
def config(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    path = tmp_path / "run.yaml"
    path.write_text(YAML.format(corpus=corpus, run=tmp_path / "run"))
    return path


def threads_taking(pid, signum):
    """How many of the process's threads have `signum` unblocked (/proc's SigBlk; a thread waiting
    in sigwait shows it unblocked while it waits). A thread that ends between the listing and the
    read (a short-lived library thread) is not counted."""
    count = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                status = f.read()
        except (FileNotFoundError, ProcessLookupError):  # ENOENT at open, ESRCH at read
            continue
        blocked = int(re.search(r"^SigBlk:\s*([0-9a-f]+)", status, re.M).group(1), 16)
        count += not blocked >> (signum - 1) & 1
    return count


def test_sigterm_checkpoints_at_the_step_boundary_and_resume_continues(config, tmp_path):
    command = [sys.executable, DRIVER, "--config", str(config), "--set", "training.steps=100000",
               "--set", "checkpoint.every=0"]
    # Two OpenMP threads: the step's parallel regions run on a worker thread besides the main one.
    process = subprocess.Popen(command, cwd=REPO, env=dict(ENV, OMP_NUM_THREADS="2"), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    lines, takers, threads = [], None, 0
    for line in process.stdout:
        lines.append(line)
        if line.startswith("Iteration: 3/"):
            # One thread (the driver's watcher) takes the stop signals; no working thread is interrupted.
            takers = {sig: threads_taking(process.pid, sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
            threads = len(os.listdir(f"/proc/{process.pid}/task"))
            process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 0, "".join(lines)
    assert threads >= 2 and takers == {signal.SIGTERM: 1, signal.SIGUSR1: 1}, (threads, takers)
    message = [line for line in lines if line.startswith("preempted by SIGTERM at step ")]
    assert len(message) == 1, "".join(lines)
    step = int(re.search(r"at step (\d+)", message[0]).group(1))
    assert (tmp_path / "run" / "checkpoints" / f"step_{step:08d}" / "manifest.json").exists()
    resumed = subprocess.run([sys.executable, DRIVER, "--config", str(config), "--resume", "auto",
                              "--set", f"training.steps={step + 2}"], cwd=REPO, env=ENV, capture_output=True,
                             text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert f"at step {step}" in resumed.stderr + resumed.stdout
    assert re.search(rf"^Iteration: {step + 1}/{step + 2} ", resumed.stdout, re.M), resumed.stdout


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not found")
def test_supervisor_restarts_a_killed_rank_and_reaches_the_same_final_loss(config, tmp_path):
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    launch = [MPIRUN, "-np", "2", *root, "--oversubscribe", "--mca", "mpi_yield_when_idle", "1",
              "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", "-x", "MYRIAD_FAULT", "-x", "MYRIAD_ATTEMPT",
              sys.executable, DRIVER, "--config", str(config), "--set", "parallel.dp=2"]
    clean = subprocess.run(launch + ["--set", f"logging.dir={tmp_path / 'clean'}"], cwd=REPO, env=ENV,
                           capture_output=True, text=True, timeout=180)
    assert clean.returncode == 0, clean.stderr
    env = dict(ENV, MYRIAD_FAULT="kill:rank=1:step=5")
    supervised = subprocess.run([sys.executable, "-m", "myriad.run", "--max-restarts", "2", "--backoff", "0.2", "--",
                                 *launch, "--set", f"logging.dir={tmp_path / 'faulted'}"], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=300)
    assert supervised.returncode == 0, supervised.stderr
    log = supervised.stderr
    assert "attempt 1 failed" in log and "MYRIAD_FAULT: killing this rank after step 5" in log
    assert "--resume auto" in log and "attempt 2 finished (exit code 0)" in log
    # The newest complete checkpoint: step 4, or step 2 when the kill came while step 4 was still
    # being written in the background (it never appears half-written).
    resumed = re.search(r"resumed from \S+step_0*(\d+) at step (\d+)", log)
    assert resumed and resumed.group(1) == resumed.group(2) and int(resumed.group(1)) in (2, 4), log
    assert FINAL.search(supervised.stdout).group(1) == FINAL.search(clean.stdout).group(1)


def test_a_kill_during_a_background_save_never_damages_the_previous_checkpoint(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    config = tmp_path / "big.yaml"
    # C 256, 4 layers: a ~40 MB checkpoint, so the background write is still running when the
    # process dies right after handing it over.
    config.write_text(YAML.format(corpus=corpus, run=tmp_path / "run").replace(
        "n_layer: 2, n_head: 2, n_embd: 32", "n_layer: 4, n_head: 4, n_embd: 256"))
    base = [sys.executable, DRIVER, "--config", str(config), "--set", "training.steps=8"]
    clean = subprocess.run(base + ["--set", f"logging.dir={tmp_path / 'clean'}"], cwd=REPO, env=ENV,
                           capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr
    run_dir = tmp_path / "faulted"
    killed = subprocess.run(base + ["--set", f"logging.dir={run_dir}"], cwd=REPO,
                            env=dict(ENV, MYRIAD_FAULT="kill_in_save:rank=0:step=4"), capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    checkpoints = run_dir / "checkpoints"
    assert (checkpoints / ".tmp-step_00000004").is_dir(), sorted(os.listdir(checkpoints))  # died mid-write
    assert (checkpoints / ".tmp-step_00000004" / "rank_0.bin").exists()  # its data file was being written
    assert not (checkpoints / ".tmp-step_00000004" / "manifest.json").exists()
    assert not (checkpoints / "step_00000004").exists()
    assert (checkpoints / "latest").read_text().strip() == "step_00000002"
    resumed = subprocess.run(base + ["--set", f"logging.dir={run_dir}", "--resume", "auto"], cwd=REPO, env=ENV,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "step_00000002 at step 2" in resumed.stderr
    assert not (checkpoints / ".tmp-step_00000004").exists()  # removed by the next save
    assert FINAL_8.search(resumed.stdout).group(1) == FINAL_8.search(clean.stdout).group(1)
