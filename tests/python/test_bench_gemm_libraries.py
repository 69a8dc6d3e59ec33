"""bench_gemm --libraries: the step's-GEMMs ceiling table sums the per-shape table it prints (layers x the four
block layers' three GEMMs, plus the LM head's three, per library), cpu::sgemm's column and its ratio to OpenBLAS
agree with the rates printed, and bad sizes are refused with exit 2. One
run at tiny sizes (a few seconds on 2 cores); skipped when build/benchmarks/bench_gemm is missing."""
import os
import subprocess

import pytest
from package_under_test import REPO

BENCH_GEMM = os.path.join(REPO, "build", "benchmarks", "bench_gemm")
pytestmark = pytest.mark.skipif(not os.path.exists(BENCH_GEMM), reason="build/benchmarks/bench_gemm not built")


def table_rows(text, first_header):
    """The rows of the markdown table whose header starts with `first_header`, as lists of cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| " + first_header))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def test_the_step_gemm_ceiling_is_the_sum_of_the_shapes_it_printed():
    layers, tokens, embd, vocab = 3, 64, 32, 96
    result = subprocess.run([BENCH_GEMM, "--libraries", "--quick", "--tokens", str(tokens), "--embd", str(embd),
                             "--vocab", str(vocab), "--layers", str(layers)], capture_output=True, text=True,
                            timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stderr
    shapes = table_rows(result.stdout, "GEMM ")
    ceiling = table_rows(result.stdout, "token rows")
    libraries = [row["library"] for row in ceiling if row["token rows"] == str(tokens)]
    assert "OpenBLAS" in libraries and len(ceiling) == 2 * len(libraries)
    assert len(shapes) == 31 and shapes[-1]["GEMM"] == "C = A B"
    for group, rows in enumerate((tokens // 8, tokens)):
        block = shapes[15 * group:15 * group + 15]
        assert all(int(s["M" if s["GEMM"] != "dy^T x" else "K"]) == rows for s in block)
        for library in libraries:
            flops = seconds = 0.0
            for i, s in enumerate(block):
                count = 1 if i >= 12 else layers  # the LM head (out = vocab) once, the blocks' layers L times
                f = 2.0 * int(s["M"]) * int(s["N"]) * int(s["K"])
                flops += count * f
                seconds += count * f / (float(s[f"{library} GFLOP/s"]) * 1e9)
            row = next(r for r in ceiling if r["token rows"] == str(rows) and r["library"] == library)
            assert float(row["GEMM GFLOP/step"]) == pytest.approx(flops / 1e9, abs=0.051)
            # The printed rates are rounded to 0.1 GFLOP/s: the sum of their times agrees to a few percent.
            assert float(row["GEMM ms/step"]) == pytest.approx(seconds * 1e3, rel=0.05, abs=0.051)
    assert int(shapes[12]["N"]) == vocab and int(shapes[0]["N"]) == 3 * embd
    # cpu::sgemm (what the CPU ops call) is timed beside the libraries, never named the fastest library, and
    # its ratio to OpenBLAS is the ratio of the two printed rates.
    assert "cpu::sgemm" in libraries
    for s in shapes:
        assert s["fastest library"] != "cpu::sgemm" and s["fastest library"] in libraries
        want = float(s["cpu::sgemm GFLOP/s"]) / float(s["OpenBLAS GFLOP/s"])
        assert float(s["cpu::sgemm / OpenBLAS"].rstrip("x")) == pytest.approx(want, rel=0.02, abs=0.011)


@pytest.mark.parametrize("flag,value", [("--layers", "0"), ("--tokens", "4"), ("--tokens", "100"), ("--embd", "x"),
                                        ("--vocab", "1e3")])
def test_bad_sizes_are_refused_naming_the_flags(flag, value):
    result = subprocess.run([BENCH_GEMM, "--libraries", flag, value], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and f"{flag}" in result.stderr and value in result.stderr, result.stderr
    assert "GFLOP/s" not in result.stdout


@pytest.mark.parametrize("args,says", [(["--layers", "3"], "--layers sizes --libraries"),
                                       (["--libraries", "--profile", "p.json"], "writes no profile")])
def test_options_that_would_not_act_are_refused(args, says):
    result = subprocess.run([BENCH_GEMM, *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and says in result.stderr, result.stderr
