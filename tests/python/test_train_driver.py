"""python/train.py end to end, as a subprocess on a tiny corpus and model: the metric, validation,
checkpoint and sample lines; resuming from the newest checkpoint; configuration and data errors
reported as one "error: ..." line and a non-zero exit code (no traceback)."""
import os
import re
import subprocess
import sys

import pytest

import myriad
from tiny_corpus import write_corpus

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DRIVER = os.path.join(REPO, "python", "train.py")

TINY_YAML = """\
model:
  architecture: gpt2
  vocab_size: 320
  n_layer: 2
  n_head: 2
  n_embd: 32
  block_size: 32
training:
  micro_batch: 4
  gradient_accumulation: 2
  seq_len: 32
  steps: 30
  lr: 3.0e-3
  eval_batches: 2
data:
  path: {corpus}
  tokenizer: "train:320"
logging:
  dir: {run}
sample:
  tokens: 24
  prompt: "the cat"
"""

FIRST_RUN = ["--set", "training.steps=12", "--set", "logging.every=4", "--set", "training.eval_every=6",
             "--set", "checkpoint.every=6"]

STEP_LINE = re.compile(r"^step +(\d+)/(\d+) \| loss ([0-9.]+) \| lr \S+ \| grad_norm \S+ \| tok/s ([0-9.]+)([kMGT]?) \| "
                       r"(\d+) ms/step \| MFU ([0-9.]+)% \| comm (\d+)% \| mem ([0-9.]+) GiB$")


def run_driver(config_path, *args):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), OMP_NUM_THREADS="2")
    return subprocess.run([sys.executable, DRIVER, "--config", str(config_path), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(config path, run dir) of a tiny run on a generated corpus."""
    root = tmp_path_factory.mktemp("driver")
    corpus = write_corpus(root / "corpus.txt")
    config = root / "tiny.yaml"
    config.write_text(TINY_YAML.format(corpus=corpus, run=root / "run"))
    return config, root / "run"


@pytest.fixture(scope="module")
def first_run(tiny):
    config, run = tiny
    return run_driver(config, *FIRST_RUN)


def step_lines(stdout):
    return [STEP_LINE.match(line) for line in stdout.splitlines() if STEP_LINE.match(line)]


def check_throughput(stdout):
    """tok/s * ms/step must equal the tokens of one step: ms/step is the mean over the steps
    since the previous metric line (whatever their number), tok/s their token rate. Both are
    printed rounded; the check allows exactly that rounding plus 1%."""
    tokens_per_step = int(re.search(r"training \d+ steps on \d+ rank\(s\), (\d+) tokens/step", stdout).group(1))
    scale = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    for m in step_lines(stdout):
        rate, unit, ms = float(m.group(4)), scale[m.group(5)], int(m.group(6))
        low = (rate - 0.05) * unit * max(ms - 0.5, 0.0) / 1000
        high = (rate + 0.05) * unit * (ms + 0.5) / 1000
        assert low * 0.99 <= tokens_per_step <= high * 1.01, (m.group(0), tokens_per_step)


def test_fresh_run_prints_metrics_eval_checkpoint_and_sample(first_run, tiny):
    config, run = tiny
    assert first_run.returncode == 0, first_run.stderr
    out = first_run.stdout
    lines = step_lines(out)
    assert [int(m.group(1)) for m in lines] == [1, 4, 8, 12]  # step 1, every 4, and the last
    assert all(int(m.group(2)) == 12 for m in lines)
    losses = [float(m.group(3)) for m in lines]
    assert losses[-1] < losses[0] - 0.5, losses
    assert re.search(r"^step +6/12 \| val loss [0-9.]+$", out, re.M)
    assert re.search(r"^step +12/12 \| val loss [0-9.]+$", out, re.M)
    assert re.search(r"^final \| val loss [0-9.]+$", out, re.M)
    assert re.search(r"^\[rank 0\] checkpoint: .*step_00000012$", out, re.M)
    sample = out.split("---- sample ----\n", 1)[1].split("\n----------------", 1)[0]
    assert sample.startswith("the cat") and len(sample) > len("the cat")
    assert "Traceback" not in first_run.stderr
    checkpoints = run / "checkpoints"
    assert (checkpoints / "step_00000006").is_dir() and (checkpoints / "step_00000012").is_dir()
    # The run directory holds the resolved config with the overrides applied.
    written = myriad.Config.from_file(str(run / "config.yaml"))
    assert written.steps == 12 and written.checkpoint_every == 6 and written.logging_every == 4


def test_ms_per_step_is_the_mean_over_the_logged_window(first_run):
    assert first_run.returncode == 0, first_run.stderr
    check_throughput(first_run.stdout)


def test_resume_auto_continues_from_the_newest_checkpoint(first_run, tiny):
    config, run = tiny
    assert first_run.returncode == 0, first_run.stderr
    resumed = run_driver(config, *FIRST_RUN, "--resume", "auto", "--set", "training.steps=14")
    assert resumed.returncode == 0, resumed.stderr
    out = resumed.stdout
    assert "step     1/" not in out
    assert re.search(r"^step +(13|14)/14 \| loss", out, re.M)
    assert all(int(m.group(1)) > 12 for m in step_lines(out)), out
    assert re.search(r"resumed from .*step_00000012 at step 12", resumed.stderr)
    assert re.search(r"^\[rank 0\] checkpoint: .*step_00000014$", out, re.M)
    assert "---- sample ----" in out
    check_throughput(out)  # the first window after resuming holds 2 steps, not logging.every


def test_bad_override_exits_with_a_message(tiny):
    config, _ = tiny
    result = run_driver(config, "--set", "training.steps=2", "--set", "training.lr=fast")
    assert result.returncode != 0
    assert re.search(r"^error: .*training\.lr: expected a number, got 'fast'", result.stderr, re.M), result.stderr
    assert "Traceback" not in result.stderr
    assert "step" not in result.stdout
    result = run_driver(config, "--set", "training.lrr=1e-3")
    assert result.returncode != 0
    assert re.search(r"^error: .*unknown key 'training\.lrr'", result.stderr, re.M), result.stderr


def test_missing_data_path_exits_naming_it(tiny, tmp_path):
    config, _ = tiny
    missing = tmp_path / "no_such_corpus.txt"
    result = run_driver(config, "--set", f"data.path={missing}", "--set", f"logging.dir={tmp_path / 'run'}")
    assert result.returncode != 0
    assert re.search(r"^error: .*data\.path '" + re.escape(str(missing)) + "' does not exist", result.stderr, re.M), \
        result.stderr
    assert "Traceback" not in result.stderr


def test_missing_config_and_checkpoint_exit_naming_them(tiny, tmp_path):
    config, _ = tiny
    result = run_driver(tmp_path / "no_such.yaml")
    assert result.returncode != 0
    assert re.search(r"^error: .*no_such\.yaml", result.stderr, re.M), result.stderr
    missing = tmp_path / "no_checkpoint"
    result = run_driver(config, "--resume", str(missing), "--set", f"logging.dir={tmp_path / 'run'}")
    assert result.returncode != 0
    assert re.search(r"^error: .*" + re.escape(str(missing)), result.stderr, re.M), result.stderr
    assert "Traceback" not in result.stderr
