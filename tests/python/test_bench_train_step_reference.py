"""bench_train_step --reference torch: PyTorch's reference is the case's own architecture (GPT-2, or
LLaMA-style with RMSNorm, SwiGLU, RoPE, grouped-query attention, with or without biases and a tied
head), checked by the benchmark itself — its parameter count must equal myriad's, else no ratio
(exit 3) — and a model the reference does not have (a mixture of experts) is refused up front
(exit 2). Tiny shapes, one round (--quick): ~18 s per case on 2 cores. Skipped without torch or without
build/benchmarks/bench_train_step."""
import os
import subprocess
import sys

import pytest
from package_under_test import REPO

BENCH = os.path.join(REPO, "build", "benchmarks", "bench_train_step")
pytestmark = pytest.mark.skipif(not os.path.exists(BENCH), reason="build/benchmarks/bench_train_step not built")

TINY = ["--layers", "2", "--embd", "64", "--heads", "4", "--batch", "2", "--seq", "16", "--steps", "1", "--quick"]


def run_bench(*args):
    return subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def reference_row(stdout):
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| config") and "torch fused" in line)
    return [cell.strip() for cell in lines[start + 2].strip("|").split("|")]


# Between them the two cases turn every knob of the reference: LayerNorm / RMSNorm, GELU / SwiGLU,
# learned / rotary positions, a tied / untied head, biases off / on (on a SwiGLU block: the gate's,
# not the up matrix's), grouped-query attention in both families, a given MLP width.
@pytest.mark.parametrize("config, extra_yaml", [
    ("gpt2_tiny.yaml", "  bias: false\n  n_kv_head: 2\n  ffn_hidden: 96\n"),
    ("llama_tiny.yaml", "  bias: true\n"),
])
def test_the_reference_is_the_same_model(config, extra_yaml, tmp_path):
    pytest.importorskip("torch")
    text = open(os.path.join(REPO, "configs", config)).read().replace("model:\n", "model:\n" + extra_yaml, 1)
    path = str(tmp_path / config)
    with open(path, "w") as f:
        f.write(text)
    result = run_bench("--config", path, *TINY, "--reference", "torch", "--python", sys.executable)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    row = reference_row(result.stdout)
    assert row[0].startswith(config) and row[1:3] == ["2", "16"]
    mine, fused, ratio = float(row[3]), float(row[5]), row[7]
    assert mine > 0.05 and fused > 0.05 and ratio.endswith("x")
    # The times are printed to 0.1 ms, the ratio (of the unrounded times) to 0.01.
    assert (fused - 0.05) / (mine + 0.05) - 0.005 <= float(ratio[:-1]) <= (fused + 0.05) / (mine - 0.05) + 0.005


def test_a_mixture_of_experts_is_refused_naming_why():
    result = run_bench("--config", os.path.join(REPO, "configs", "moe_tiny.yaml"), *TINY, "--reference", "torch")
    assert result.returncode == 2
    assert "mixture of experts (model.num_experts" in result.stderr and "does not model" in result.stderr
