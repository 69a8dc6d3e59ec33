"""The collective watchdog: a rank that stops arriving at collectives (MYRIAD_FAULT=stall: its
main thread sleeps after a step) is named by the other ranks' watchdog — the collective, its
number in the group, the group's ranks, and which ranks never arrived — and the job is aborted
long before the stall ends, instead of hanging. Layouts: dp 2 (the stalled rank's dp peer waits
in the step's first all-reduce) and dp 2 x pp 2 (the stalled rank is a pipeline stage: its
pipeline peer waits in a receive, which is not watched, and its dp peer in the gradient
all-reduce, which is)."""
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from tiny_corpus import write_corpus
from package_under_test import DRIVER, PYTHONPATH

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MPIRUN = shutil.which("mpirun")

pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun not found")

YAML = """\
model: {{architecture: gpt2, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 32, context_length: 32}}
training: {{micro_batch: 2, gradient_accumulation: 2, seq_len: 32, steps: 12, lr: 3.0e-3, \
eval_batches: 2, eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
logging: {{dir: {run}, every: 1}}
sample: {{tokens: 0}}
"""

REPORT = re.compile(r"\[rank (\d+)\] watchdog: (\w+) #(\d+) on group '(\w+)' \(world ranks ([0-9, ]+)\) has not "
                    r"completed after ([0-9.]+) s \(parallel.collective_timeout 5.0 s\); never arrived: (.*?); "
                    r"not responding: (.*?)\. Aborting the job\.")


@pytest.mark.parametrize("ranks,layout,stalled,group", [
    (2, "--set parallel.dp=2", 1, ("world", "dp")),
    (4, "--set parallel.dp=2 --set parallel.pp=2", 2, ("world", "dp")),
])
def test_a_stalled_rank_is_named_and_the_job_aborts(tmp_path, ranks, layout, stalled, group):
    corpus = write_corpus(tmp_path / "corpus.txt")
    config = tmp_path / "run.yaml"
    config.write_text(YAML.format(corpus=corpus, run=tmp_path / "run"))
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1",
               MYRIAD_FAULT=f"stall:rank={stalled}:step=3:seconds=600")
    command = [MPIRUN, "-np", str(ranks), *root, "--oversubscribe", "--mca", "mpi_yield_when_idle", "1",
               "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", "-x", "MYRIAD_FAULT",
               sys.executable, DRIVER, "--config", str(config), *layout.split(),
               "--set", "parallel.collective_timeout=5"]  # past a loaded host's skew between healthy ranks
    start = time.time()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    elapsed = time.time() - start
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert elapsed < 300, f"the job took {elapsed:.0f} s: the stall (600 s) was not cut short\n{output}"
    assert f"[rank {stalled}] MYRIAD_FAULT: stalling" in output
    reports = REPORT.findall(output)
    assert reports, output
    reporter, op, number, name, members, waited, never, silent = reports[0]
    assert int(reporter) != stalled
    assert name in group
    assert str(stalled) in [m.strip() for m in members.split(",")]
    assert int(number) >= 1 and float(waited) >= 5.0
    assert never.startswith(f"rank {stalled} (last collective issued on '{name}': #"), never
    last = int(re.search(r"#(\d+)", never).group(1))
    assert last < int(number)  # it stopped before the collective the others are stuck in
    assert silent == "none"  # its watchdog thread still answers while its main thread sleeps
