"""bench_cpu_ops: one run at 16 token rows prints every vector kernel's row with a time and a rate that
agree (GB/s = the op's bytes / its time), names what the kernels run as (this build's -march=native, or a
portable build's dispatched clone), and refuses bad arguments with exit 2. Skipped when
build/benchmarks/bench_cpu_ops is missing."""
import os
import subprocess

import pytest
from package_under_test import REPO

BENCH = os.path.join(REPO, "build", "benchmarks", "bench_cpu_ops")
pytestmark = pytest.mark.skipif(not os.path.exists(BENCH), reason="build/benchmarks/bench_cpu_ops not built")

OPS = ["cross_entropy_forward", "cross_entropy_backward", "layernorm_forward", "layernorm_backward", "gelu_forward",
       "gelu_backward", "linear_dgelu_backward", "softmax_forward", "adamw_update", "grad_norm_squared"]


def run(*args):
    return subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def test_every_kernel_has_a_row_and_the_header_names_the_isa():
    rows = 16
    result = run("--rows", str(rows))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    kernels = next(line for line in lines if line.startswith("- the CPU ops' vector kernels: "))
    assert any(w in kernels for w in ("-march=native", "run-time dispatch", "portable build")), kernels
    table = [line for line in lines if line.startswith("| ") and not line.startswith("| op ")]
    assert [row.split("|")[1].split()[0] for row in table] == OPS
    # cross_entropy_forward reads rows x 50304 floats: its GB/s is those bytes over its ms.
    cells = [c.strip() for c in table[0].strip("|").split("|")]
    ms, rate = float(cells[1]), float(cells[2])
    assert rate == pytest.approx(rows * 50304 * 4 / (ms * 1e-3) / 1e9, rel=0.06, abs=0.06)


@pytest.mark.parametrize("args", [["--rows", "0"], ["--bogus"]])
def test_bad_arguments_exit_2(args):
    result = run(*args)
    assert result.returncode == 2
    assert "bench_cpu_ops" in result.stderr
