"""The supervisor `python -m myriad.run` (python/myriad/run.py): exit code 2 (bad input, or
training.max_nonfinite_steps reached) and 126/127 are deterministic and stop it at once, saying
why; other failures are restarted with backoff; under mpirun a rank's MPI_Abort(2) reaches it as
mpirun's exit code 2 (Open MPI 4) — and, should a launcher map the code, through mpirun's
"MPI_ABORT ... with errorcode 2" line."""
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from tiny_corpus import write_corpus
from package_under_test import DRIVER, PYTHONPATH

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MPIRUN = shutil.which("mpirun")
ENV = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")

_spec = importlib.util.spec_from_file_location("myriad_run", os.path.join(REPO, "python", "myriad", "run.py"))
supervisor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(supervisor)


def supervise(command, *options, env=ENV, timeout=120):
    """`python -m myriad.run OPTIONS -- COMMAND`."""
    return subprocess.run([sys.executable, "-m", "myriad.run", *options, "--", *command], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_which_exit_codes_are_deterministic():
    assert "bad input" in supervisor.deterministic_cause(2, None)
    assert "not found" in supervisor.deterministic_cause(127, None)
    assert supervisor.deterministic_cause(126, None)
    assert "MPI_Abort with error code 2" in supervisor.deterministic_cause(1, 2)
    for code in (1, 3, 137, -9, 255):
        assert supervisor.deterministic_cause(code, None) is None, code
    assert supervisor.deterministic_cause(3, 3) is None


def test_bad_input_exit_code_stops_at_once():
    result = supervise([sys.executable, "-c", "import sys; print('error: bad key', file=sys.stderr); sys.exit(2)"],
                       "--max-restarts", "3", "--backoff", "30")
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("attempt ") == 2  # "attempt 1/4: ..." and "attempt 1 failed"
    assert "not restarting: exit code 2: bad input" in result.stderr, result.stderr
    assert "restarting from the newest checkpoint" not in result.stderr


def test_other_failures_are_restarted():
    result = supervise([sys.executable, "-c", "import sys; sys.exit(3)"], "--max-restarts", "1", "--backoff", "0")
    assert result.returncode == 3
    assert "attempt 2/2" in result.stderr and "giving up after 2 attempts" in result.stderr, result.stderr
    assert "not restarting" not in result.stderr


def test_mpirun_abort_line_with_errorcode_2_stops_too():
    # A launcher that reports the abort but exits 1: the supervisor reads mpirun's own lines.
    text = ("--------\\nMPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\\nwith errorcode 2.\\n\\n"
            "NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\\n--------\\n")
    result = supervise([sys.executable, "-c", f"import sys; sys.stderr.write('{text}'); sys.exit(1)"],
                       "--max-restarts", "3", "--backoff", "30")
    assert result.returncode == 1
    assert "not restarting: a rank called MPI_Abort with error code 2" in result.stderr, result.stderr


def test_the_failure_summary_shows_the_drivers_error_not_only_mpiruns_abort_text():
    # The driver's report (with its indented continuation), then mpirun's banner: more lines than
    # the summary's tail keeps.
    banner = "".join(f"[1,0]<stderr>: banner line {i}\\n" for i in range(30))
    text = ("[1,0]<stderr>:error: [rank 0] resume auto: none of the 1 checkpoint(s) in /ckpt is intact:\\n"
            "[1,0]<stderr>:  /ckpt/step_00000002: fails its checksum\\n" + banner +
            "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\\nwith errorcode 2.\\n")
    result = supervise([sys.executable, "-c", f"import sys; sys.stderr.write('{text}'); sys.exit(2)"],
                       "--max-restarts", "1", "--backoff", "0")
    assert result.returncode == 2
    summary = result.stderr.split("[myriad.run]")[2]  # the "attempt 1 failed" entry
    assert summary.split("; last stderr lines:")[0].endswith(
        "attempt 1 failed: exit code 2; cause: [rank 0] resume auto: none of the 1 checkpoint(s) in /ckpt is "
        "intact:\n      /ckpt/step_00000002: fails its checksum"), result.stderr


YAML = """\
model: {{architecture: gpt2, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 32, context_length: 32}}
training: {{micro_batch: 2, gradient_accumulation: 2, seq_len: 16, steps: 6, lr: 3.0e-3, eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
logging: {{dir: {run}, every: 1, measure_peak: false}}
sample: {{tokens: 0}}
"""


def mpirun_command(*args):
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [MPIRUN, "-np", "2", *root, "--oversubscribe", "--mca", "mpi_yield_when_idle", "1",
            "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", sys.executable, DRIVER, *args]


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not found")
def test_under_mpirun_a_config_error_and_divergence_are_not_restarted(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", lines=600)
    config = tmp_path / "run.yaml"
    config.write_text(YAML.format(corpus=corpus, run=tmp_path / "run"))
    # A bad flag: every rank exits 2 before MPI starts; mpirun exits 2.
    flag = subprocess.run(mpirun_command("--config", str(config), "--model_type=13B"), env=ENV, capture_output=True,
                          text=True, timeout=120)
    assert flag.returncode == 2, flag.stderr
    assert flag.stderr.count("error: --model_type does not apply") == 1, flag.stderr  # rank 0 only
    # A bad key: the ranks call MPI_Abort(2); mpirun exits 2; the supervisor stops at once.
    bad = supervise(mpirun_command("--config", str(config), "--set", "training.lrr=1"),
                    "--max-restarts", "3", "--backoff", "30")
    assert bad.returncode == 2, bad.stderr
    assert "unknown key 'training.lrr'" in bad.stderr and "not restarting: exit code 2" in bad.stderr, bad.stderr
    assert "attempt 2/" not in bad.stderr
    # Divergence: training.max_nonfinite_steps stops the run with exit code 2, not restarted either.
    nan = supervise(mpirun_command("--config", str(config), "--set", "training.weight_decay=1e30",
                                   "--set", "training.max_nonfinite_steps=2"),
                    "--max-restarts", "3", "--backoff", "30")
    assert nan.returncode == 2, nan.stderr
    assert "training.max_nonfinite_steps" in nan.stderr and "not restarting: exit code 2" in nan.stderr, nan.stderr
    assert "Traceback" not in nan.stderr
