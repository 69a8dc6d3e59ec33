"""benchmarks/bench_serve.py --quick keeps working: both servers measured (closed loop with wrk, the
open-loop rates), the table, the batching gain and the transformers comparison printed (the numbers themselves are the
benchmark's, docs/performance.md); it and bench_http_front.py refuse values wrk or the sweep cannot run (exit 2)
before starting a server."""
import os
import shutil
import subprocess
import sys

import pytest

from package_under_test import PYTHONPATH, REPO
from serve_process import skip_reason


@pytest.mark.skipif(skip_reason() is not None or shutil.which("wrk") is None,
                    reason=str(skip_reason() or "wrk is not installed (scripts/setup.sh installs it)"))
def test_bench_serve_quick_prints_its_table():
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    out = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "bench_serve.py"), "--quick", "--auth"],
                         env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "| continuous batching |" in out.stdout and "| one request at a time |" in out.stdout, out.stdout
    assert "batching gain (closed-loop QPS):" in out.stdout
    assert "| continuous batching, --auth (one API key) |" in out.stdout
    assert "authentication: closed-loop QPS" in out.stdout
    assert "transformers" in out.stdout
    if os.environ.get("MYRIAD_REQUIRE_HF"):  # torch and transformers are installed: the comparison ran
        assert "batch 32:" in out.stdout and "myriad serve continuous batching / this:" in out.stdout, out.stdout


@pytest.mark.parametrize("script, args, message", [
    ("bench_http_front.py", ["--connections", "1"], "--connections must be >= 2"),
    ("bench_http_front.py", ["--duration", "0.5"], "--duration must be >= 1"),
    ("bench_serve.py", ["--duration", "0"], "--duration must be >= 1"),
    ("bench_serve.py", ["--start-rate", "-1"], "--start-rate must be > 0"),
])
def test_serving_benchmarks_refuse_values_they_cannot_run_before_starting_anything(script, args, message):
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    out = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", script), *args], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr, out.stderr
