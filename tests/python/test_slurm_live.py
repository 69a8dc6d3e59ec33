"""The Slurm recipe under a live Slurm (scripts/slurm_local.sh: munged, slurmctld and slurmd on this
machine; partitions `low` and `high`, preemption by partition priority with PreemptMode=REQUEUE).
Batch scripts come from `python -m myriad.operations.sbatch` (CPU ranks: --gpus-per-node 0
--tasks-per-node N) and are submitted with the real `sbatch`; ranks start under `srun --mpi=pmix`:
- a `low` job preempted by a `high` one: its ranks get SIGTERM, checkpoint and exit, the batch
  script requeues it, the requeued job resumes from that checkpoint and ends at the loss of an
  uninterrupted run of the same script;
- `scancel` of a running job leaves a complete checkpoint named by `latest`;
- a job array (`--sweep training.lr=...`) trains each value in a run folder of its own.
Skipped, with the reason, where the daemons cannot run (not root, packages missing)."""
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

from myriad.operations import sbatch, slurm_trace
from package_under_test import PYTHONPATH
from tiny_corpus import write_corpus

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SLURM_LOCAL = os.path.join(REPO, "scripts", "slurm_local.sh")
LAST = re.compile(r"^Iteration: (\d+)/\d+ \| Loss: ([0-9.]+) ", re.M)
FINAL = re.compile(r"^Final \| Val Loss: ([0-9.]+)", re.M)

CONFIG = """\
model: {{architecture: gpt2, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 64, context_length: 64}}
training: {{micro_batch: 4, gradient_accumulation: 1, seq_len: 64, steps: {steps}, lr: 3.0e-3, eval_batches: 1, \
eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
checkpoint: {{every: 50}}
logging: {{measure_peak: false, dir: {run}, every: 50}}
sample: {{tokens: 0}}
"""


def free_port_pair():
    """Two consecutive free TCP ports (slurmctld's and slurmd's)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port > 60000:
            continue
        with socket.socket() as t:
            try:
                t.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    pytest.skip("no two consecutive free ports for slurmctld and slurmd")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running local Slurm; yields the environment its clients need."""
    if shutil.which("sbatch") is None and not os.path.exists("/usr/bin/sbatch"):
        pytest.skip("Slurm is not installed (Debian slurm-wlm and munge; scripts/setup.sh installs them)")
    folder = tmp_path_factory.mktemp("slurm")
    os.chmod(folder, 0o755)
    env = dict(os.environ, MYRIAD_SLURM_PORT=str(free_port_pair()), MYRIAD_SLURM_GRACE_S="30")
    started = subprocess.run([SLURM_LOCAL, "start", str(folder)], env=env, capture_output=True, text=True,
                             timeout=120)
    if started.returncode == 3:
        pytest.skip(started.stderr.strip())
    assert started.returncode == 0, started.stdout + started.stderr
    client = dict(os.environ, SLURM_CONF=str(folder / "slurm.conf"))
    try:
        yield client
    finally:
        subprocess.run([SLURM_LOCAL, "stop", str(folder)], env=env, capture_output=True, timeout=120)


def scontrol_job(env, job):
    """scontrol show job's fields of `job` as a dict (one job: the array task's own id)."""
    return slurm_trace.job_fields(str(job), env)


def wait_for(what, predicate, timeout=120, poll=0.25):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def submit(env, script, *extra):
    result = subprocess.run(["sbatch", "--parsable", *extra, str(script)], env=env, capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def finished(env, job):
    """The job's final state once it has left the queue (COMPLETED, CANCELLED, FAILED, ...), else None.
    A requeued job waits out Slurm's requeue delay (BeginTime, two minutes); the test lets it start now."""
    info = scontrol_job(env, job)
    state = info.get("JobState")
    if state == "PENDING" and info.get("Reason") == "BeginTime":
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env, timeout=30)
    return state if state in ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY") else None


def job_script(tmp_path, name, steps, ranks, *, sweep=None):
    """The run's config and its batch script (CPU ranks under srun, partition low)."""
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        write_corpus(corpus)
    config = tmp_path / f"{name}.yaml"
    config.write_text(CONFIG.format(steps=steps, corpus=corpus, run=tmp_path / name))
    (tmp_path / "logs").mkdir(exist_ok=True)
    text = sbatch.render_sbatch(sbatch.SbatchRequest(
        config=str(config), nodes=1, gpus_per_node=0, tasks_per_node=ranks, job_name=name, time_limit="10",
        partition="low", output_dir=str(tmp_path / "logs"), signal_lead_s=60, cpus_per_task=1, exclusive=False,
        python=sys.executable, environment={"PYTHONPATH": PYTHONPATH}, sweep=sweep))
    script = tmp_path / f"{name}.sbatch"
    script.write_text(text)
    return script, tmp_path / name


def job_log(tmp_path, name, job):
    path = tmp_path / "logs" / f"{name}-{job}.out"
    return path.read_text() if path.exists() else ""


def test_a_preempted_job_checkpoints_requeues_and_ends_at_the_uninterrupted_loss(slurm, tmp_path):
    straight, _ = job_script(tmp_path, "straight", 1000, 2)
    job = submit(slurm, straight)
    assert wait_for("the uninterrupted job", lambda: finished(slurm, job)) == "COMPLETED", job_log(tmp_path,
                                                                                                   "straight", job)
    reference = job_log(tmp_path, "straight", job)

    script, run = job_script(tmp_path, "preempted", 1000, 2)
    low = submit(slurm, script)
    wait_for("step 200 of the low-priority job", lambda: "Iteration: 200/" in job_log(tmp_path, "preempted", low))
    high = submit(slurm, "--partition=high", "--ntasks=2", f"--output={tmp_path / 'logs' / 'high-%j.out'}",
                  "--wrap", "sleep 1")
    assert wait_for("the low-priority job", lambda: finished(slurm, low), timeout=180) == "COMPLETED"
    assert wait_for("the high-priority job", lambda: finished(slurm, high)) == "COMPLETED"
    log = job_log(tmp_path, "preempted", low)
    stopped = re.search(r"preempted by SIGTERM at step (\d+): checkpoint ([^;\s]+)", log)
    assert stopped, log
    step = int(stopped.group(1))
    assert 200 <= step < 1000
    assert f"checkpoint step -1 -> {step} of 1000: preempted" in log, log
    assert "(restart 1): checkpoint step" in log and f"resumed from {stopped.group(2)} at step {step}" in log, log
    assert f"checkpoint step {step} -> 1000 of 1000: finished" in log, log
    assert int(scontrol_job(slurm, low)["Restarts"]) == 1
    # The high-priority job ran while the low one was requeued: it ended before the requeued run started.
    assert scontrol_job(slurm, high)["EndTime"] <= scontrol_job(slurm, low)["StartTime"]
    # The requeued run continues the same curve: its last logged loss and validation loss are the
    # uninterrupted run's.
    assert LAST.findall(log)[-1] == LAST.findall(reference)[-1]
    assert LAST.findall(log)[-1][0] == "1000"
    assert FINAL.findall(log) == FINAL.findall(reference) and FINAL.findall(log)
    assert (run / "rank0.log").exists() and (run / "rank1.log").exists() and (run / "metrics.jsonl").exists()


def test_scancel_of_a_running_job_leaves_a_complete_checkpoint(slurm, tmp_path):
    script, run = job_script(tmp_path, "cancelled", 100000, 2)
    job = submit(slurm, script)
    wait_for("step 200", lambda: "Iteration: 200/" in job_log(tmp_path, "cancelled", job))
    subprocess.run(["scancel", job], env=slurm, check=True, timeout=30)
    assert wait_for("the cancelled job", lambda: finished(slurm, job)) == "CANCELLED"
    log = job_log(tmp_path, "cancelled", job)
    # The ranks stop on the first of Slurm's SIGTERM and the batch shell's forwarded SIGUSR1.
    stopped = re.search(r"preempted by SIG(?:TERM|USR1) at step (\d+): checkpoint ([^;\s]+)", log)
    assert stopped, log
    assert f"checkpoint step -1 -> {stopped.group(1)} of 100000: stopped" in log, log
    checkpoints = run / "checkpoints"
    newest = (checkpoints / "latest").read_text().strip()
    assert newest == f"step_{int(stopped.group(1)):08d}"
    assert (checkpoints / newest / ".myriad-checkpoint").exists() and (checkpoints / newest / "manifest.json").exists()
    assert not [p for p in os.listdir(checkpoints) if p.startswith(".") or p.endswith(".tmp")]
    assert int(scontrol_job(slurm, job).get("Restarts", 0)) == 0  # cancelled, never requeued


def test_a_job_array_sweeps_two_learning_rates_in_their_own_folders(slurm, tmp_path):
    script, run = job_script(tmp_path, "sweep", 200, 1, sweep="training.lr=1e-3,3e-3")
    array = submit(slurm, script)
    tasks = [f"{array}_0", f"{array}_1"]
    for task in tasks:
        assert wait_for(f"array task {task}", lambda task=task: finished(slurm, task)) == "COMPLETED"
    finals = []
    for index, lr in enumerate(("0.001", "0.003")):
        folder = run / f"sweep_{index}"
        assert re.search(rf"^\s*lr: {lr}\b", (folder / "config.yaml").read_text(), re.M), lr
        assert (folder / "checkpoints" / "latest").read_text().strip() == "step_00000200"
        log = job_log(tmp_path, "sweep", f"{array}_{index}")
        assert "of 200: finished" in log, log
        finals.append(LAST.findall(log)[-1])
    assert finals[0][0] == finals[1][0] == "200" and finals[0][1] != finals[1][1]


# j4 must arrive after j1's restart (simulated at 9, on Slurm 1-2 s later, more on a loaded machine) for
# its second preemption: at 12 a CI run under compile load saw j1 restart after j4 had taken the CPU.
TRACE = """\
id,arrival,nodes,duration,priority
j1,0,2,10,best_effort
j2,3,1,5,research
j3,5,1,4,prod
j4,16,1,3,research
"""


def test_the_simulator_schedules_a_trace_as_slurm_does(slurm, tmp_path):
    """The same sleep-job trace on Slurm and in the simulator (myriad.operations.slurm_trace): the same
    start order and preemptions; Slurm's makespan later by its scheduling latency only."""
    from myriad.operations import cluster_sim

    (tmp_path / "trace.csv").write_text(TRACE)
    jobs = cluster_sim.load_trace(str(tmp_path / "trace.csv"))
    cpus = int(subprocess.run(["sinfo", "-h", "-o", "%c"], env=slurm, capture_output=True, text=True,
                              timeout=30).stdout.split()[0])
    if cpus != 2:
        pytest.skip(f"the trace is written for a 2-CPU node, this one has {cpus}")
    simulated = slurm_trace.simulate(jobs, cpus)
    measured = slurm_trace.replay(jobs, env=slurm)
    text, summary = slurm_trace.compare(jobs, simulated, measured)
    assert summary["states"] == ["COMPLETED"], text
    assert summary["start_order_slurm"] == summary["start_order_sim"] == ["j1", "j2", "j3", "j4"], text
    assert [simulated[j]["preemptions"] for j in ("j1", "j2", "j3", "j4")] == [2, 0, 0, 0], text
    assert [measured[j]["restarts"] for j in ("j1", "j2", "j3", "j4")] == [2, 0, 0, 0], text
    assert summary["makespan_sim"] == 29.0
    # Six scheduling events (4 starts, 2 restarts), each a second or two on Slurm, more under load.
    assert 29.0 <= summary["makespan_slurm"] <= 29.0 + 12.0, text
    print(text)
