"""Elastic restarts (myriad/elastic.py, `python -m myriad.run --hostfile`): the plan for a shrunken
or spare-refilled host list keeps the model-parallel degrees and the global batch (dp recomputed,
gradient accumulation raised; a global batch no dp divides leaves ranks idle; no fitting layout
is an error naming why); the mpirun command is rewritten with the new -np and hostfile; and end
to end, a 4-rank data-parallel job whose hostfile loses a "node" (2 of its ranks) while rank 3 is
killed restarts on the 2 ranks that remain with dp 4 -> 2 and gradient accumulation 1 -> 2, and its
loss curve continues the uninterrupted 4-rank run's."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from myriad import elastic
from package_under_test import DRIVER, PYTHONPATH
from tiny_corpus import write_corpus

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MPIRUN = shutil.which("mpirun")


def hosts(*spec):
    return [elastic.Host(name, slots, spare) for name, slots, spare in spec]


def test_plans_keep_the_global_batch_with_the_most_ranks():
    facts = elastic.LayoutFacts(model_parallel=1, micro_batch=2, global_batch=8)  # dp 4 x micro 2 x accum 1
    four = elastic.plan_world(hosts(("a", 2, False), ("b", 2, False)), facts, 4)
    assert (four.world, four.dp, four.micro_batch, four.gradient_accumulation, four.idle) == (4, 4, 2, 1, 0)
    two = elastic.plan_world(hosts(("a", 2, False)), facts, 4)
    assert (two.world, two.dp, two.micro_batch, two.gradient_accumulation) == (2, 2, 2, 2)
    # 3 slots: dp 3 does not divide 8 sequences, so dp 2 and one idle slot.
    three = elastic.plan_world(hosts(("a", 3, False)), facts, 4)
    assert (three.world, three.dp, three.gradient_accumulation, three.idle) == (2, 2, 2, 1)
    # A spare replaces the lost host, and never grows the job beyond its first world.
    spared = elastic.plan_world(hosts(("a", 2, False), ("s1", 2, True), ("s2", 2, True)), facts, 4)
    assert [h.name for h in spared.hosts] == ["a", "s1"] and spared.dp == 4
    # Model parallelism kept: tp x pp = 2 per replica.
    mp = elastic.plan_world(hosts(("a", 4, False), ("b", 2, False)),
                            elastic.LayoutFacts(model_parallel=2, micro_batch=4, global_batch=16), 8)
    assert (mp.world, mp.dp, mp.micro_batch, mp.gradient_accumulation, mp.idle) == (4, 2, 4, 2, 2)  # dp 3 ∤ 16
    # The micro-batch shrinks only when the per-replica batch needs it (here 6 / dp 2 = 3 < micro 4).
    odd = elastic.plan_world(hosts(("a", 2, False)), elastic.LayoutFacts(1, 4, 6), 3)
    assert (odd.dp, odd.micro_batch, odd.gradient_accumulation) == (2, 3, 1)


def test_no_fitting_layout_is_an_error_naming_why():
    with pytest.raises(ValueError, match=r"cannot hold one model replica \(tp x pp x cp = 4 ranks\)"):
        elastic.plan_world(hosts(("a", 2, False)), elastic.LayoutFacts(4, 1, 8), 8)
    refuse = lambda dp, micro, accum: "parallel.ep 4 must divide parallel.dp" if dp < 4 else None  # noqa: E731
    with pytest.raises(ValueError, match=r"dp 2: parallel.ep 4 must divide parallel.dp"):
        elastic.plan_world(hosts(("a", 2, False)), elastic.LayoutFacts(1, 2, 8), 4, refuse)


def test_hostfile_lines_and_errors(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# the job's hosts\nnode-a slots=4\nnode-b slots=4  # rack 2\nnode-c slots=4 spare\nnode-d\n")
    assert elastic.read_hostfile(path) == hosts(("node-a", 4, False), ("node-b", 4, False), ("node-c", 4, True),
                                                ("node-d", 1, False))
    path.write_text("node-a slots=four\n")
    with pytest.raises(ValueError, match=r"hosts:1: 'node-a slots=four'"):
        elastic.read_hostfile(path)
    path.write_text("node-c slots=2 spare\n")
    with pytest.raises(ValueError, match="no host left"):
        elastic.read_hostfile(path)


def test_the_mpirun_command_is_rewritten_for_the_plan():
    plan = elastic.WorldPlan(hosts(("a", 2, False)), 2, 0, 2, 2, 2)
    command = ["mpirun", "-np", "4", "--oversubscribe", "--hostfile", "old", "python", "-m", "myriad.train",
               "--config", "c.yaml", "--resume", "auto"]
    assert elastic.relaunch(command, plan, "new") == [
        "mpirun", "-np", "2", "--oversubscribe", "--hostfile", "new", "python", "-m", "myriad.train", "--config",
        "c.yaml", "--resume", "auto", "--set", "parallel.dp=2", "--set", "training.micro_batch=2", "--set",
        "training.gradient_accumulation=2"]
    assert elastic.relaunch(["mpirun", "python", "t.py"], plan, "h")[:5] == ["mpirun", "-np", "2", "--hostfile", "h"]
    with pytest.raises(ValueError, match="needs an mpirun command"):
        elastic.relaunch(["python", "t.py"], plan, "h")
    with pytest.raises(ValueError, match="drop mpirun's --host"):
        elastic.relaunch(["mpirun", "--host", "a,b", "python"], plan, "h")


YAML = """\
model: {{architecture: gpt2, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 32, context_length: 32}}
training: {{micro_batch: 2, gradient_accumulation: 1, seq_len: 32, steps: 40, lr: 3.0e-3, eval_batches: 1, \
eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
checkpoint: {{every: 10}}
logging: {{measure_peak: false, dir: {run}, every: 1}}
sample: {{tokens: 0}}
"""


def train_losses(run):
    """{step: loss} of the run's metrics.jsonl (a restarted run appends; the last record wins)."""
    losses = {}
    with open(run / "metrics.jsonl") as f:
        for line in f:
            record = json.loads(line)
            if record.get("kind") == "train":
                losses[record["step"]] = record["loss"]
    return losses


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not found")
def test_a_job_that_loses_a_node_restarts_on_the_ranks_that_remain_and_its_loss_continues(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    config = tmp_path / "run.yaml"
    config.write_text(YAML.format(corpus=corpus, run=tmp_path / "elastic"))
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    mpirun = [MPIRUN, "-np", "4", *root, "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-x", "PYTHONPATH",
              "-x", "OMP_NUM_THREADS", "-x", "MYRIAD_FAULT", "-x", "MYRIAD_ATTEMPT"]
    driver = [sys.executable, DRIVER, "--config", str(config)]
    reference = subprocess.run(mpirun + driver + ["--set", f"logging.dir={tmp_path / 'reference'}"], cwd=REPO,
                               env=env, capture_output=True, text=True, timeout=300)
    assert reference.returncode == 0, reference.stdout + reference.stderr

    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=2\n127.0.0.1 slots=2\n")  # two "nodes" of this machine
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "myriad.run", "--max-restarts", "2", "--backoff", "0.2", "--hostfile", str(hostfile),
         "--", *mpirun, *driver], cwd=REPO, env=dict(env, MYRIAD_FAULT="kill:rank=3:step=25"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in supervisor.stdout:
        lines.append(line)
        if "[myriad.run]" in line and "attempt 1/3:" in line:
            hostfile.write_text("localhost slots=2\n")  # the "node" 127.0.0.1 is gone for good
    assert supervisor.wait(timeout=300) == 0, "".join(lines)
    out = "".join(lines)
    assert "elastic: hosts localhost:2, 127.0.0.1:2; world 4, dp 4, micro_batch 2, gradient_accumulation 1" in out
    assert ("elastic: lost 127.0.0.1; world 4 -> 2; dp 4 -> 2; micro_batch 2 -> 2; gradient_accumulation 1 -> 2"
            in out), out
    assert re.search(r"attempt 2/3: \S*mpirun --hostfile \S+ -np 2 ", out), out
    assert "resumed from" in out and "at step 20" in out, out
    before, after = train_losses(tmp_path / "reference"), train_losses(tmp_path / "elastic")
    assert sorted(after) == list(range(1, 41))
    # The same global batch at dp 2 x accumulation 2: the curve continues the 4-rank run's (float
    # sums in another order, so to a relative 1e-4).
    for step in range(1, 41):
        assert after[step] == pytest.approx(before[step], rel=1e-4), step
