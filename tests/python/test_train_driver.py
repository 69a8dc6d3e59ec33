"""python/train.py end to end, as a subprocess on a tiny corpus and model: the metric line (the
cluster-training recipe's monitoring fields), validation, checkpoint and sample lines; resuming from the
newest checkpoint; configuration and data errors reported as one "error: ..." line, exit code 2
and the source location in the rank's log (no traceback); steps with non-finite loss or
gradients printed with nan instead of crashing the driver, and training.max_nonfinite_steps
ending the run with exit code 2 and a message naming it."""
import os
import re
import subprocess
import sys

import pytest

import myriad
from tiny_corpus import write_corpus
from package_under_test import DRIVER, PYTHONPATH

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

TINY_YAML = """\
model:
  architecture: gpt2
  vocab_size: 320
  n_layer: 2
  n_head: 2
  n_embd: 32
  context_length: 32
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
  measure_peak: false
sample:
  tokens: 24
  prompt: "the cat"
"""

FIRST_RUN = ["--set", "training.steps=12", "--set", "logging.every=4", "--set", "training.eval_every=6",
             "--set", "checkpoint.every=6"]

STEP_LINE = re.compile(r"^Iteration: (\d+)/(\d+) \| Loss: ([0-9.]+) \| Comm: (\d+)% \| "
                       r"Samples/sec: ([0-9.]+)([kMGT]?) \| "
                       r"Grad Norm: [0-9.]+ \| Tokens/sec: ([0-9.]+)([kMGT]?) \| MFU: ([0-9.]+)% \| (\d+) ms/step \| "
                       r"Mem: ([0-9.]+) GiB \| LR: \S+$")


def run_driver(config_path, *args):
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="2")
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


def rounding(text):
    """Half a unit of the last printed digit of `text`."""
    return 0.5 * 10 ** -(len(text.split(".")[1]) if "." in text else 0)


def check_throughput(stdout):
    """Tokens/sec * ms/step must equal the tokens of one step, Samples/sec * ms/step its
    sequences: ms/step is the mean over the steps since the previous metric line (whatever their
    number), the rates are theirs. Both are printed rounded; the check allows exactly that
    rounding plus 1%."""
    tokens_per_step = int(re.search(r"training \d+ steps on \d+ rank\(s\), (\d+) tokens/step", stdout).group(1))
    scale = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    lines = step_lines(stdout)
    assert lines, stdout
    for m in lines:
        ms = int(m.group(10))
        for rate_text, unit, per_step in ((m.group(7), m.group(8), tokens_per_step),
                                          (m.group(5), m.group(6), tokens_per_step // 32)):  # seq_len 32
            rate, half = float(rate_text), rounding(rate_text)
            low = (rate - half) * scale[unit] * max(ms - 0.5, 0.0) / 1000
            high = (rate + half) * scale[unit] * (ms + 0.5) / 1000
            assert low * 0.99 <= per_step <= high * 1.01, (m.group(0), per_step)


def test_fresh_run_prints_metrics_eval_checkpoint_and_sample(first_run, tiny):
    config, run = tiny
    assert first_run.returncode == 0, first_run.stderr
    out = first_run.stdout
    lines = step_lines(out)
    assert [int(m.group(1)) for m in lines] == [1, 4, 8, 12]  # step 1, every 4, and the last
    assert all(int(m.group(2)) == 12 for m in lines)
    losses = [float(m.group(3)) for m in lines]
    assert losses[-1] < losses[0] - 0.5, losses
    assert re.search(r"^Iteration: 6/12 \| Val Loss: [0-9.]+$", out, re.M)
    assert re.search(r"^Iteration: 12/12 \| Val Loss: [0-9.]+$", out, re.M)
    assert re.search(r"^Final \| Val Loss: [0-9.]+$", out, re.M)
    assert re.search(r"^\[rank 0\] checkpoint: .*step_00000012$", out, re.M)
    sample = out.split("---- sample ----\n", 1)[1].split("\n----------------", 1)[0]
    assert sample.startswith("the cat") and len(sample) > len("the cat")
    assert "Traceback" not in first_run.stderr
    checkpoints = run / "checkpoints"
    assert (checkpoints / "step_00000006").is_dir() and (checkpoints / "step_00000012").is_dir()
    # The run directory holds the resolved config with the overrides applied.
    written = myriad.Config.from_file(str(run / "config.yaml"))
    assert written["training.steps"] == 12 and written["checkpoint.every"] == 6 and written["logging.every"] == 4


def test_ms_per_step_is_the_mean_over_the_logged_window(first_run):
    assert first_run.returncode == 0, first_run.stderr
    check_throughput(first_run.stdout)


def test_resume_auto_continues_from_the_newest_checkpoint(first_run, tiny):
    config, run = tiny
    assert first_run.returncode == 0, first_run.stderr
    resumed = run_driver(config, *FIRST_RUN, "--resume", "auto", "--set", "training.steps=14")
    assert resumed.returncode == 0, resumed.stderr
    out = resumed.stdout
    assert "Iteration: 1/" not in out
    assert re.search(r"^Iteration: (13|14)/14 \| Loss: ", out, re.M)
    assert all(int(m.group(1)) > 12 for m in step_lines(out)), out
    assert re.search(r"resumed from .*step_00000012 at step 12", resumed.stderr)
    assert re.search(r"^\[rank 0\] checkpoint: .*step_00000014$", out, re.M)
    assert "---- sample ----" in out
    check_throughput(out)  # the first window after resuming holds 2 steps, not logging.every


def test_bad_override_exits_with_a_message(tiny):
    config, _ = tiny
    result = run_driver(config, "--set", "training.steps=2", "--set", "training.lr=fast")
    assert result.returncode == 2
    assert re.search(r"^error: .*training\.lr: expected a number, got 'fast'", result.stderr, re.M), result.stderr
    assert "Traceback" not in result.stderr
    assert "Iteration" not in result.stdout
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


def test_error_is_one_line_and_goes_to_the_rank_log_with_its_source_location(tiny, tmp_path):
    config, _ = tiny
    run = tmp_path / "run"
    result = run_driver(config, "--log_dir", str(run), "--set", "training.lrr=1e-3")
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and re.match(r"^error: \[rank 0\] .*unknown key 'training\.lrr'", errors[0]), result.stderr
    assert "Traceback" not in result.stderr
    log = (run / "rank0.log").read_text()
    assert re.search(r"^\[[0-9-]+ [0-9:.]+\] \[rank 0\] \[error\] \S+\.(cpp|h):\d+: .*unknown key 'training\.lrr'",
                     log, re.M), log


def nonfinite_lines(stdout):
    return [line for line in stdout.splitlines() if line.startswith("Iteration: ") and "| Loss: " in line]


def test_fp16_steps_skipped_by_the_loss_scaler_are_printed(tiny, tmp_path):
    config, _ = tiny
    # A loss scale of 1e30 overflows every fp16 gradient: each step is skipped and the scale
    # halved (the scaler's normal search, not counted by training.max_nonfinite_steps).
    result = run_driver(config, "--log_dir", str(tmp_path / "run"), "--set", "training.precision=fp16",
                        "--set", "training.initial_loss_scale=1e30", "--set", "training.steps=3",
                        "--set", "logging.every=10", "--set", "sample.tokens=0", "--set", "training.eval_every=0")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = nonfinite_lines(result.stdout)
    assert [int(re.match(r"Iteration: (\d+)/", line).group(1)) for line in lines] == [1, 2, 3], result.stdout
    for line, scale in zip(lines, ("1e+30", "5e+29", "2.5e+29")):
        assert re.search(r"\| Grad Norm: nan \|", line), line
        assert line.endswith(f"| skipped (loss scale {scale})"), line


def test_non_finite_loss_is_printed_every_step_and_max_nonfinite_steps_ends_the_run(tiny, tmp_path):
    config, _ = tiny
    common = ["--set", "training.weight_decay=1e30", "--set", "logging.every=10", "--set", "sample.tokens=0",
              "--set", "training.eval_every=0"]
    # Never stopping: the run ends, printing every non-finite step (not only logging steps).
    result = run_driver(config, "--log_dir", str(tmp_path / "endless"), *common, "--set", "training.steps=4",
                        "--set", "training.max_nonfinite_steps=0")
    assert result.returncode == 0, result.stderr
    lines = nonfinite_lines(result.stdout)
    assert [int(re.match(r"Iteration: (\d+)/", line).group(1)) for line in lines] == [1, 2, 3, 4], result.stdout
    assert all("| Loss: nan |" in line and line.endswith("| skipped (non-finite gradients)") for line in lines[1:]), \
        result.stdout
    # The limit: three non-finite steps in a row end the run with exit code 2 and a message
    # naming the key, no traceback.
    result = run_driver(config, "--log_dir", str(tmp_path / "stopped"), *common, "--set", "training.steps=20",
                        "--set", "training.max_nonfinite_steps=3")
    assert result.returncode == 2, result.stdout + result.stderr
    assert re.search(r"^error: \[rank 0\] .*training\.max_nonfinite_steps", result.stderr, re.M), result.stderr
    assert "Traceback" not in result.stderr
    assert len(nonfinite_lines(result.stdout)) < 20


def test_a_second_fresh_run_into_the_same_folder_is_refused_and_loses_nothing(first_run, tiny):
    config, run = tiny
    assert first_run.returncode == 0, first_run.stderr
    checkpoints = run / "checkpoints"
    before = {name: (checkpoints / name / "manifest.json").read_bytes() for name in os.listdir(checkpoints)
              if name.startswith("step_")}
    config_yaml = (run / "config.yaml").read_text()
    result = run_driver(config, "--set", "training.steps=3")
    assert result.returncode == 2, result.stderr
    assert re.search(r"^error: \[rank 0\] the checkpoint folder " + re.escape(str(checkpoints)) +
                     r" already holds \d+ checkpoint\(s\) of another run .*--resume auto.*logging\.dir",
                     result.stderr, re.M), result.stderr
    assert "Iteration" not in result.stdout
    after = {name: (checkpoints / name / "manifest.json").read_bytes() for name in os.listdir(checkpoints)
             if name.startswith("step_")}
    assert after == before
    assert (run / "config.yaml").read_text() == config_yaml, "the first run's config.yaml was overwritten"


def test_a_config_that_is_a_directory_or_empty_is_refused(tiny, tmp_path):
    result = run_driver(tmp_path)
    assert result.returncode == 2
    assert re.search(r"^error: .*is a directory; --config takes a YAML file", result.stderr, re.M), result.stderr
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing here\n")
    result = run_driver(empty)
    assert result.returncode == 2
    assert re.search(r"^error: .*empty\.yaml: the config is empty", result.stderr, re.M), result.stderr
    assert "Iteration" not in result.stdout


def test_logging_dir_under_a_regular_file_is_a_clear_error(tiny, tmp_path):
    config, _ = tiny
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    result = run_driver(config, "--set", f"logging.dir={blocker / 'run'}", "--set", "training.steps=2")
    assert result.returncode == 2, result.stderr
    assert re.search(r"^error: .*logging\.dir '" + re.escape(str(blocker / "run")) + "' cannot be created",
                     result.stderr, re.M), result.stderr
    assert "Traceback" not in result.stderr


def test_error_text_with_bytes_that_are_not_utf8_keeps_file_and_problem(tiny, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"model:\n  architecture: gpt\xff\xfe2\n")
    with pytest.raises(myriad.Error) as raised:
        myriad.Config.from_file(str(bad))
    text = str(raised.value)
    assert "bad.yaml:2" in text and "model.architecture" in text and "\ufffd" in text, text
    assert raised.value.rank == 0 and raised.value.line > 0 and raised.value.file.endswith(".cpp")
