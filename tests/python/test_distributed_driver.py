"""python/train.py under mpirun with two ranks: data parallelism reproduces the single-process
losses printed by the driver, every metric reaches metrics.jsonl (and the plot command renders
it), and an error on one rank (a bad config key, a missing corpus) ends every rank promptly with
the message instead of leaving the other rank waiting in a collective (each launch runs under a
timeout far above its normal duration)."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from test_metrics import check_train_record, render
from tiny_corpus import write_corpus
from package_under_test import DRIVER, PYTHONPATH

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MPIRUN = shutil.which("mpirun")
TIMEOUT = 300  # seconds; a healthy run here takes a few seconds (a hang: parallel.collective_timeout, 600 s)

pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun not found")

TINY_YAML = """\
model: {{architecture: gpt2, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 32, context_length: 32}}
training: {{micro_batch: 2, gradient_accumulation: 2, seq_len: 32, steps: 8, lr: 3.0e-3, \
eval_batches: 2, eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
logging: {{measure_peak: false, dir: {run}, every: 1, straggler_every: 4}}
sample: {{tokens: 0}}
"""

LOSS = re.compile(r"^Iteration: (\d+)/\d+ \| Loss: ([0-9.]+) ", re.M)


def mpirun(ranks, per_rank_command):
    """Runs `per_rank_command` (a shell string; $OMPI_COMM_WORLD_RANK is the rank) on `ranks` ranks."""
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    command = [MPIRUN, "-np", str(ranks), *root, "--oversubscribe", "--mca", "mpi_yield_when_idle", "1",
               "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", "sh", "-c", per_rank_command]
    start = time.time()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    return result, time.time() - start


@pytest.fixture
def tiny(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY_YAML.format(corpus=corpus, run=tmp_path / "run"))
    return config, tmp_path


def serial_run(config, root):
    """One process on the global batch of the two-rank runs (4 micro-batches)."""
    serial = subprocess.run([sys.executable, DRIVER, "--config", str(config),
                             "--set", "logging.dir=" + str(root / "one"), "--set", "training.gradient_accumulation=4"],
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=PYTHONPATH),
                            capture_output=True, text=True, timeout=TIMEOUT)
    assert serial.returncode == 0, serial.stderr
    return serial


def driver(config, extra=""):
    return f"{sys.executable} {DRIVER} --config {config} {extra}"


def test_two_ranks_reproduce_the_single_process_losses(tiny):
    config, root = tiny
    serial = serial_run(config, root)
    for stage in (0, 3):
        result, _ = mpirun(2, driver(config, f"--set parallel.dp=2 --set parallel.zero_stage={stage} "
                                             f"--set logging.dir={root / ('two' + str(stage))}"))
        assert result.returncode == 0, result.stdout + result.stderr
        one = [float(loss) for _, loss in LOSS.findall(serial.stdout)]
        two = [float(loss) for _, loss in LOSS.findall(result.stdout)]
        assert len(one) == len(two) == 8
        # The driver prints 4 decimals; the curves agree far below that (tests/mpi checks 1e-4).
        assert max(abs(a - b) for a, b in zip(one, two)) <= 2e-4, (one, two)
        assert "on 2 rank(s)" in result.stdout
        assert "checkpoint:" in result.stdout
        # Every metric is in the JSONL of the dp = 2 run, with exposed dp communication.
        records = [json.loads(line) for line in open(root / ("two" + str(stage)) / "metrics.jsonl")]
        train = [r for r in records if r["kind"] == "train"]
        assert len(train) == 8
        for record in train:
            check_train_record(record)
            assert record["comm_axis_share"]["tp"] == 0.0
        assert all(r["comm_axis_seconds"]["dp"] > 0 for r in train)
        assert all(r["comm_bytes"] > 0 for r in train)
        if stage == 0:
            pytest.importorskip("matplotlib")
            written = render(root / "two0")
            assert len(written) == 6


def test_the_moe_recipes_launch_line_runs_as_written(tiny):
    """`mpirun -np N -hostfile hostfile python train.py --config config.yaml --log_dir DIR` (the
    1.6T MoE recipe's line; python3 and the driver's path are this machine's): no --set at all, parallel.dp
    comes from the world size, the run directory from --log_dir, and the global batch of the
    config (2 x 2 x dp 2) reproduces the serial loss curve."""
    config, root = tiny
    serial = serial_run(config, root)
    (root / "hostfile").write_text("localhost slots=2\n")
    shutil.copy(config, root / "config.yaml")
    root_flag = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    result = subprocess.run(
        [MPIRUN, *root_flag, "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-x", "PYTHONPATH", "-x",
         "OMP_NUM_THREADS", "-np", "2", "-hostfile", "hostfile", sys.executable, DRIVER, "--config", "config.yaml",
         "--log_dir", str(root / "logs" / "train")],
        cwd=root, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stdout + result.stderr
    written = (root / "logs" / "train" / "config.yaml").read_text()
    assert "\n  dp: 2\n" in written
    one = [float(loss) for _, loss in LOSS.findall(serial.stdout)]
    two = [float(loss) for _, loss in LOSS.findall(result.stdout)]
    assert len(one) == len(two) == 8 and max(abs(a - b) for a, b in zip(one, two)) <= 2e-4, (one, two)
    assert "resolved config" not in result.stdout + result.stderr, "the resolved config belongs in the log file"
    assert "resolved config" in (root / "logs" / "train" / "rank0.log").read_text()


def test_the_moe_recipes_launch_line_runs_from_the_repository_root(tiny):
    """The same line with `train.py` as written, run from the repository root (its train.py runs
    python/train.py): two ranks train and write the log folder --log_dir names."""
    config, root = tiny
    root_flag = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    logs = root / "logs" / "from_root"
    result = subprocess.run(
        [MPIRUN, *root_flag, "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-x", "PYTHONPATH", "-x",
         "OMP_NUM_THREADS", "-np", "2", sys.executable, "train.py", "--config", str(config), "--log_dir", str(logs),
         "--set", "training.steps=2", "--set", f"checkpoint.dir={root / 'from_root_checkpoints'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "\n  dp: 2\n" in (logs / "config.yaml").read_text()
    assert len(LOSS.findall(result.stdout)) >= 1, result.stdout


@pytest.mark.parametrize("layout,axis", [("parallel.tp=2", "tp"), ("parallel.pp=2", "pp"),
                                         ("parallel.tp=2 --set parallel.sequence_parallel=true", "tp")])
def test_tensor_and_pipeline_parallel_driver_runs_reproduce_the_single_process_losses(tiny, layout, axis):
    config, root = tiny
    serial = serial_run(config, root)
    run = root / axis
    result, _ = mpirun(2, driver(config, f"--set {layout} --set training.gradient_accumulation=4 "
                                         f"--set logging.dir={run}"))
    assert result.returncode == 0, result.stdout + result.stderr
    one = [float(loss) for _, loss in LOSS.findall(serial.stdout)]
    two = [float(loss) for _, loss in LOSS.findall(result.stdout)]
    assert len(one) == len(two) == 8
    assert max(abs(a - b) for a, b in zip(one, two)) <= 2e-4, (one, two)
    records = [json.loads(line) for line in open(run / "metrics.jsonl")]
    train = [r for r in records if r["kind"] == "train"]
    assert len(train) == 8
    for record in train:
        check_train_record(record)
        assert record["comm_axis_seconds"]["dp"] == 0.0
    if axis == "tp":
        assert all(r["comm_axis_seconds"]["tp"] > 0 for r in train)
        assert all(r["bubble_seconds"] == 0.0 for r in train)
    else:  # the pipeline: rank 0 (the first stage) waits for the last stage's gradients
        assert all(r["bubble_seconds"] > 0 for r in train)
        assert "| Bubble: " in result.stdout


@pytest.mark.parametrize("name,bad_override,needles", [
    ("bad_config", "training.lr=-1", ["training.lr", "rank 1"]),   # refused by the config check
    ("missing_corpus", "data.path={root}/nope.txt", ["nope.txt", "rank 1"]),  # fails in data preparation
])
def test_an_error_on_one_rank_ends_every_rank(tiny, name, bad_override, needles):
    config, root = tiny
    extra = f"--set parallel.dp=2 --set logging.dir={root / name}"
    bad = bad_override.format(root=root)
    command = (f'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then X="--set {bad}"; else X=""; fi; '
               f"exec {driver(config, extra)} $X")
    result, seconds = mpirun(2, command)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    for needle in needles:
        assert needle in output, output
    assert seconds < TIMEOUT / 2, f"took {seconds:.0f} s: the healthy rank was left waiting"


MOE_RECIPE_MOE_YAML = """\
model:
  architecture: MoE
  num_experts: 4
  top_k: 2
  expert_capacity: 12
  vocab_size: 320
  n_layer: 2
  n_head: 2
  n_embd: 32
  context_length: 32
parallel: {{ep: 2}}
training: {{micro_batch: 2, gradient_accumulation: 2, seq_len: 32, steps: 8, lr: 3.0e-3, \
eval_batches: 2, eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
logging: {{measure_peak: false, dir: {run}, every: 1}}
sample: {{tokens: 0}}
"""


MOE_RECIPE_SPARSE_YAML = """\
model:
  architecture: llama
  vocab_size: 320
  n_layer: 2
  n_head: 4
  n_kv_head: 2
  n_embd: 32
  context_length: 256
  attention:
    kind: block_sparse
    sparse_ratio: 0.7
    block_size: 64
    threshold: 0.1
parallel: {{tp: 2}}
training: {{micro_batch: 2, gradient_accumulation: 1, seq_len: 256, steps: 4, lr: 3.0e-3, \
eval_batches: 1, eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
logging: {{measure_peak: false, dir: {run}, every: 1}}
sample: {{tokens: 6}}
"""


def test_the_moe_recipes_sparse_attention_keys_train_with_heads_split_over_two_ranks(tmp_path):
    """The 1.6T MoE recipe's attention_config (sparse_ratio 0.7, block_size 64, threshold 0.1) under
    model.attention with tp 2: it trains, prints and records what the per-head selection kept,
    samples text (the forward re-run over the prefix), and the losses equal one process's."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    config = tmp_path / "sparse.yaml"
    config.write_text(MOE_RECIPE_SPARSE_YAML.format(corpus=corpus, run=tmp_path / "run"))
    result, _ = mpirun(2, driver(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Attn: [0-9.]+ blocks \([0-9.]+%\) est. mass [0-9.]+", result.stdout), result.stdout
    assert "---- sample ----" in result.stdout
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert len(train) == 4
    for r in train:
        a = r["attention"]
        # 4 query blocks: 1 + 2 + 3 + 4 causal blocks; the fixed pattern alone keeps 1 + 2 + 2 + 2.
        assert 7 / 4 <= a["kept_blocks_per_query_block"] <= 10 / 4
        assert 0.7 <= a["density"] <= 1.0
        assert 0.0 < a["estimated_mass"] <= 1.0
    serial = subprocess.run([sys.executable, DRIVER, "--config", str(config), "--set", "parallel.tp=1",
                             "--set", "logging.dir=" + str(tmp_path / "one")],
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=PYTHONPATH),
                            capture_output=True, text=True, timeout=TIMEOUT)
    assert serial.returncode == 0, serial.stderr
    one = [float(loss) for _, loss in LOSS.findall(serial.stdout)]
    two = [float(loss) for _, loss in LOSS.findall(result.stdout)]
    assert len(one) == len(two) == 4
    assert max(abs(a - b) for a, b in zip(one, two)) <= 2e-4, (one, two)


def test_the_moe_recipes_moe_block_trains_with_experts_split_over_two_ranks(tmp_path):
    """The 1.6T MoE recipe's model keys verbatim (architecture: MoE, num_experts, top_k, expert_capacity) with
    parallel.ep 2: it trains, prints the MoE part of the step line, and metrics.jsonl carries each
    layer's routing and the ep axis's all-to-all bytes; the losses equal one process's."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    config = tmp_path / "moe.yaml"
    config.write_text(MOE_RECIPE_MOE_YAML.format(corpus=corpus, run=tmp_path / "run"))
    result, _ = mpirun(2, driver(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"MoE: aux [0-9.]+ drop [0-9.]+% load max/mean [0-9.]+", result.stdout), result.stdout
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert len(train) == 8
    for r in train:
        assert [layer["layer"] for layer in r["moe"]] == [0, 1]
        for layer in r["moe"]:
            per_expert = layer["tokens_per_expert"]
            assert per_expert["min"] <= per_expert["mean"] <= per_expert["max"]
            # (micro x accumulation x seq_len x dp) x top_k / experts
            assert per_expert["mean"] == 2 * 2 * 32 * 2 * 2 / 4
            assert 0.0 <= layer["dropped_share"] < 1.0 and layer["aux_loss"] > 0
        assert r["comm_axis_bytes"]["ep"] > 0
    # ep splits the experts, not the batch: one process on the same global batch has the same losses.
    serial = subprocess.run([sys.executable, DRIVER, "--config", str(config), "--set", "parallel.ep=1",
                             "--set", "logging.dir=" + str(tmp_path / "one"),
                             "--set", "training.gradient_accumulation=4"],
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=PYTHONPATH),
                            capture_output=True, text=True, timeout=TIMEOUT)
    assert serial.returncode == 0, serial.stderr
    one = [float(loss) for _, loss in LOSS.findall(serial.stdout)]
    two = [float(loss) for _, loss in LOSS.findall(result.stdout)]
    assert len(one) == len(two) == 8
    assert max(abs(a - b) for a, b in zip(one, two)) <= 2e-4, (one, two)
