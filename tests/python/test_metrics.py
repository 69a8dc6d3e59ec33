"""Per-step metrics of the engine (docs/metrics.md): the metrics.jsonl schema, MFU equal to a
hand-computed value for a known config and step time, no communication in a one-rank run, the
TensorBoard event file, and `python -m myriad.plot` rendering every chart from a short run."""
import json
import os
import subprocess
import sys

import pytest

import myriad
from tiny_corpus import write_corpus
from package_under_test import PYTHONPATH

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

TINY_YAML = """\
model: {{architecture: gpt2, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 32, context_length: 32}}
training: {{micro_batch: 4, gradient_accumulation: 2, seq_len: 32, steps: 6, lr: 3.0e-3, eval_batches: 2}}
data: {{path: {corpus}, tokenizer: "train:320"}}
logging: {{dir: {run}, level: warn, measure_peak: false, peak_tflops: 0.001, straggler_every: 3}}
"""

TRAIN_KEYS = {
    "kind", "step", "loss", "lr", "grad_norm", "skipped", "loss_scale", "tokens", "samples", "step_seconds",
    "tokens_per_second",
    "samples_per_second", "model_flops", "mfu", "mfu_datasheet", "data_wait_seconds", "compute_seconds",
    "comm_seconds", "comm_share", "comm_axis_seconds", "comm_axis_share", "bubble_seconds", "bubble_share",
    "data_wait_share", "comm_bytes", "comm_axis_bytes", "memory", "stragglers",
}
MEMORY_KEYS = {"parameters", "gradients", "optimizer", "activations", "workspace", "rss_current", "rss_peak"}
AXES = {"tp", "cp", "ep", "dp", "pp"}


def check_train_record(record):
    """Every documented field is present with its type (rank_compute_seconds only on check steps, moe
    only for MoE models)."""
    keys = set(record) - {"rank_compute_seconds", "moe"}  # moe: MoE models only
    assert keys == TRAIN_KEYS, keys ^ TRAIN_KEYS
    assert set(record["memory"]) == MEMORY_KEYS
    assert set(record["comm_axis_seconds"]) == AXES and set(record["comm_axis_share"]) == AXES
    assert set(record["comm_axis_bytes"]) == AXES
    assert all(isinstance(v, int) for v in record["comm_axis_bytes"].values())
    for key in ("loss", "lr", "grad_norm", "step_seconds", "tokens_per_second", "mfu", "mfu_datasheet"):
        assert isinstance(record[key], float) and record[key] >= 0, key
    assert record["kind"] == "train" and isinstance(record["step"], int)
    assert record["memory"]["rss_current"] > 0 and record["memory"]["parameters"] > 0
    assert record["compute_seconds"] <= record["step_seconds"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 6-step one-process run with one evaluation; returns (run dir, step metrics, val loss)."""
    root = tmp_path_factory.mktemp("metrics")
    corpus = write_corpus(root / "corpus.txt")
    config = myriad.Config.from_string(TINY_YAML.format(corpus=corpus, run=root / "run"), "tiny.yaml")
    engine = myriad.Engine(config)
    steps = [engine.step() for _ in range(6)]
    val = engine.evaluate()
    path = engine.metrics_path
    del engine
    return root / "run", steps, val, path


def test_mfu_cannot_pass_100_percent_when_the_peak_is_set_too_low(tmp_path):
    # A configured peak of 1 MFLOP/s (far below this machine) with the start-up GEMM measured: the
    # MFU divides by the larger of the two, so it stays a fraction of what the cores did.
    corpus = write_corpus(tmp_path / "corpus.txt")
    text = TINY_YAML.format(corpus=corpus, run=tmp_path / "run").replace(
        "measure_peak: false, peak_tflops: 0.001", "measure_peak: true, peak_tflops: 0.000001")
    engine = myriad.Engine(myriad.Config.from_string(text, "tiny.yaml"))
    peak = engine.peak_flops
    assert peak["mfu_peak"] == peak["measured"] > peak["datasheet"] == 1e6
    assert "GEMM" in peak["mfu_source"]
    for _ in range(2):
        m = engine.step()
        assert 0 < m["mfu"] < 1 < m["mfu_datasheet"]


def test_jsonl_holds_every_metric_of_every_step(run):
    run_dir, steps, val, path = run
    assert path == str(run_dir / "metrics.jsonl")
    records = [json.loads(line) for line in open(path)]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6]
    for record, returned in zip(train, steps):
        check_train_record(record)
        assert record == returned  # the engine returns exactly what it writes
    assert [r for r in records if r["kind"] == "eval"] == [{"kind": "eval", "step": 6, "val_loss": val}]
    assert "rank_compute_seconds" in train[2] and len(train[2]["rank_compute_seconds"]) == 1


def test_mfu_equals_the_hand_computed_value(run):
    _, steps, _, _ = run
    # GPT-2, V 320, L 2, C 32, T 32, tied embeddings: matmul weights per block 12 C^2; LM head V C.
    C, L, V, T = 32, 2, 320, 32
    flops_per_token = 6 * (L * 12 * C * C + V * C) + 6 * L * T * C
    assert flops_per_token == 221184
    tokens = 4 * 2 * T
    for m in steps:
        assert m["tokens"] == tokens and m["samples"] == 8
        assert m["model_flops"] == pytest.approx(flops_per_token * tokens, rel=1e-12)
        # logging.peak_tflops 0.001 = 1e9 FLOP/s per rank, one rank; measure_peak off: the MFU peak is
        # the configured one as given.
        assert m["mfu_datasheet"] == pytest.approx(flops_per_token * tokens / m["step_seconds"] / 1e9, rel=1e-9)
        assert m["mfu"] == pytest.approx(m["mfu_datasheet"], rel=1e-12)
        assert m["tokens_per_second"] == pytest.approx(tokens / m["step_seconds"], rel=1e-9)


def test_one_rank_has_no_communication(run):
    _, steps, _, _ = run
    for m in steps:
        assert m["comm_seconds"] == 0.0 and m["comm_bytes"] == 0 and m["comm_share"] == 0.0
        assert all(v == 0.0 for v in m["comm_axis_share"].values())
        assert m["bubble_share"] == 0.0 and m["stragglers"] == []


def test_tensorboard_event_file_is_written(run):
    run_dir, _, _, _ = run
    files = os.listdir(run_dir / "tensorboard")
    assert len(files) == 1 and files[0].startswith("events.out.tfevents.")
    data = (run_dir / "tensorboard" / files[0]).read_bytes()
    assert b"brain.Event:2" in data and b"train/loss" in data and b"val/loss" in data


def render(run_dir):
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    result = subprocess.run([sys.executable, "-m", "myriad.plot", str(run_dir)], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_plot_renders_every_chart(run):
    pytest.importorskip("matplotlib")
    run_dir, _, _, _ = run
    written = render(run_dir)
    names = sorted(os.path.basename(p) for p in written)
    assert names == ["comm.png", "loss.png", "memory.png", "mfu.png", "step_time_per_rank.png", "throughput.png"]
    for path in written:
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        assert os.path.getsize(path) > 5000


def test_plot_draws_the_gpu_fields_of_a_cuda_run(run, tmp_path):
    pytest.importorskip("matplotlib")
    _, _, _, path = run
    # The CPU run's records with the "gpu" object a training.device cuda run with NVML writes.
    with open(path) as src, open(tmp_path / "metrics.jsonl", "w") as dst:
        for line in src:
            record = json.loads(line)
            if record["kind"] == "train":
                record["gpu"] = {"utilization": 0.9, "memory_bw": 0.6, "pcie_bw": None, "power_watts": 600.0,
                                 "sm_clock_mhz": 1980.0, "readings": 4}
            dst.write(json.dumps(record) + "\n")
    assert str(tmp_path / "plots" / "gpu.png") in render(tmp_path)


def test_plot_without_metrics_is_a_clear_error(tmp_path):
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    result = subprocess.run([sys.executable, "-m", "myriad.plot", str(tmp_path)], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0
    assert "metrics.jsonl not found" in result.stderr
