"""Launch flags of python/train.py (python/myriad/launch_flags.py): the cluster-training recipe's launch-flag style
as aliases of config keys, the --batch_size token arithmetic, the one-line refusals of flags that
do not apply — as pure functions (no MPI, no extension) — and, end to end on a tiny corpus, the
seed's launch line with --log_dir and the order file < flags < --set."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from tiny_corpus import write_corpus
from package_under_test import DRIVER, PYTHONPATH

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Loaded from its file: the module must work without the compiled extension.
_spec = importlib.util.spec_from_file_location("launch_flags",
                                               os.path.join(REPO, "python", "myriad", "launch_flags.py"))
lf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lf)


def overrides(argv):
    driver, settings = lf.translate(argv)
    return driver, [s.override() if s.tokens is None else (s.key, s.tokens) for s in settings]


def test_seed_flags_map_to_config_keys_in_both_forms():
    driver, got = overrides(["--config", "c.yaml", "--micro_batch", "4", "--gradient_accumulation=8",
                             "--seq_length=2048", "--lr", "6e-5", "--warmup=10000", "--optimizer=adamw",
                             "--checkpoint_activations", "--bf16", "--log_dir", "/logs/train", "--set", "a.b=1"])
    assert driver == ["--config", "c.yaml", "--set", "a.b=1"]
    assert got == ["training.micro_batch=4", "training.gradient_accumulation=8", "training.seq_len=2048",
                   "training.lr=6e-5", "training.warmup_steps=10000", "training.optimizer=adamw",
                   "training.recompute=full",
                   "training.precision=bf16", "logging.dir=/logs/train"]
    # The cluster-training recipe's deepspeed line, as the shell passes it (quotes removed); hyphens equal underscores.
    _, got = overrides(["--batch_size=4M", "--gradient-accumulation=8", "--seq-length=2048", '--optimizer="adamw"',
                        "--lr=6e-5", "--warmup=10000", "--checkpoint_activations", "--fp16"])
    assert got[0] == ("training.global_batch_size", 4 * 2**20)
    assert "training.precision=fp16" in got and "training.recompute=full" in got


def test_optimizer_flag_selects_adamw_or_onebit_adam():
    assert overrides(["--optimizer", "onebit_adam"])[1] == ["training.optimizer=onebit_adam"]
    assert overrides(["--optimizer=OneBitAdam"])[1] == ["training.optimizer=onebit_adam"]  # DeepSpeed's name


def test_batch_size_in_sequences_or_tokens():
    assert overrides(["--batch_size", "512"])[1] == ["training.global_batch_size=512"]
    assert overrides(["--batch_size=4k"])[1] == [("training.global_batch_size", 4096)]
    assert overrides(["--batch_size=4K"])[1] == [("training.global_batch_size", 4096)]
    assert overrides(["--batch_size=1G"])[1] == [("training.global_batch_size", 2**30)]
    assert lf.batch_size_in_sequences(4 * 2**20, 2048) == 2048  # the seed: 4M tokens of 2048 = 2048 sequences
    with pytest.raises(lf.LaunchFlagError) as e:
        lf.batch_size_in_sequences(4096, 48, "4k")
    message = str(e.value)
    assert "--batch_size=4k (4096 tokens)" in message and "4096 / 48 = 85.3333" in message
    assert "4080 (85 sequences)" in message and "4128 (86 sequences)" in message
    for bad in ("abc", "4X", "0", "-3", "1.5"):
        with pytest.raises(lf.LaunchFlagError, match="--batch_size"):
            lf.translate(["--batch_size", bad])


def test_resume_bare_means_auto():
    assert overrides(["--resume"])[1] == ["checkpoint.resume=auto"]
    assert overrides(["--resume", "--lr", "1e-3"])[1] == ["checkpoint.resume=auto", "training.lr=1e-3"]
    assert overrides(["--resume", "runs/x/checkpoints/step_00000010"])[1] == \
        ["checkpoint.resume=runs/x/checkpoints/step_00000010"]
    assert overrides(["--resume=auto"])[1] == ["checkpoint.resume=auto"]


@pytest.mark.parametrize("argv, pattern", [
    (["--model_type=13B"], r"^--model_type does not apply to myriad: the model comes from the config's model: section"),
    (["--memory-fraction=0.8"], r"^--memory-fraction does not apply to myriad: .*--micro_batch"),
    (["--optimizer", "sgd"], r"^--optimizer sgd: not available; the optimizers are adamw .* and onebit_adam"),
    (["--fp16", "--bf16"], r"^--fp16 and --bf16 both given"),
    (["--lr", "fast"], r"^--lr: expected a number, got 'fast'$"),
    (["--micro_batch=2.5"], r"^--micro_batch: expected an integer, got '2.5'$"),
    (["--warmup"], r"^--warmup needs a value"),
    (["--learning_rate=1e-3"], r"^unknown flag --learning_rate: "),
    (["--seq_lenght=10"], r"^unknown flag --seq_lenght: did you mean --seq_length\?"),
    (["config.yaml"], r"^unexpected argument 'config.yaml'"),
])
def test_flags_that_do_not_apply_get_one_line(argv, pattern):
    with pytest.raises(lf.LaunchFlagError) as e:
        lf.translate(argv)
    assert re.search(pattern, str(e.value)), str(e.value)
    assert "\n" not in str(e.value)


def test_docs_launch_md_holds_the_flag_table():
    with open(os.path.join(REPO, "docs", "launch.md")) as f:
        assert lf.flag_table_markdown() in f.read()


# ---- end to end: the driver on a tiny corpus ----

YAML = """\
model: {{architecture: gpt2, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 32, context_length: 32}}
training: {{micro_batch: 2, gradient_accumulation: 2, seq_len: 16, steps: 2, lr: 3.0e-3, \
eval_batches: 1, eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
logging: {{dir: {run}, every: 1, measure_peak: false}}
sample: {{tokens: 0}}
"""


def run_driver(*args):
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, DRIVER, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    root = tmp_path_factory.mktemp("flags")
    path = root / "config.yaml"
    path.write_text(YAML.format(corpus=write_corpus(root / "corpus.txt", lines=600), run=root / "default_run"))
    return path


def resolved(run_dir):
    import myriad  # the written config read back by the engine's parser (the end-to-end tests need the build)

    return myriad.Config.from_file(str(run_dir / "config.yaml")).to_dict()["training"]


def test_seed_launch_line_with_log_dir_and_token_batch(config, tmp_path):
    run = tmp_path / "logs" / "train"
    # 64 tokens / seq_len 16 = 4 sequences = micro_batch 2 x accumulation 2.
    result = run_driver("--config", str(config), "--log_dir", str(run), "--batch_size=64", "--lr=1e-3",
                        "--checkpoint_activations", "--optimizer", "adamw")
    assert result.returncode == 2, result.stderr  # 64 sequences do not match micro 2 x accumulation 2
    assert re.search(r"^error: .*global_batch_size", result.stderr, re.M), result.stderr
    result = run_driver("--config", str(config), "--log_dir", str(run), "--batch_size=0.0625k", "--lr=1e-3",
                        "--checkpoint_activations", "--optimizer", "adamw")
    assert result.returncode == 0, result.stderr
    assert (run / "config.yaml").exists() and (run / "rank0.log").exists()
    assert not (config.parent / "default_run").exists()
    got = resolved(run)
    assert got["global_batch_size"] == 4 and got["lr"] == 0.001 and got["recompute"] == "full", got
    assert "Traceback" not in result.stderr


def test_set_wins_over_flags_and_token_batch_uses_the_final_seq_len(config, tmp_path):
    run = tmp_path / "run"
    # 1k tokens over the seq_len of --set (8, not the flag's 16) = 128 sequences; --set beats --lr
    # and --micro_batch whatever the order on the command line.
    result = run_driver("--config", str(config), "--set", "training.lr=2e-3", "--log_dir", str(run),
                        "--seq_length", "16", "--batch_size=1k", "--micro_batch", "2", "--lr", "1e-3",
                        "--set", "training.seq_len=8", "--set", "training.micro_batch=32",
                        "--set", "training.gradient_accumulation=0", "--set", "training.steps=1")
    assert result.returncode == 0, result.stderr
    got = resolved(run)
    assert got["seq_len"] == 8 and got["global_batch_size"] == 128 and got["micro_batch"] == 32, got
    assert got["lr"] == 0.002, got


def test_token_batch_that_does_not_divide_is_refused_with_the_arithmetic(config, tmp_path):
    result = run_driver("--config", str(config), "--log_dir", str(tmp_path / "r"), "--batch_size=1k",
                        "--set", "training.seq_len=24")
    assert result.returncode == 2
    assert re.search(r"^error: --batch_size=1k \(1024 tokens\) is not a whole number of sequences of 24 tokens: "
                     r"1024 / 24 = 42\.6667", result.stderr, re.M), result.stderr
    assert "Traceback" not in result.stderr


def test_deepspeed_style_batch_and_accumulation_derive_the_micro_batch(config, tmp_path):
    # The cluster-training recipe's style without --micro_batch: 0.125k = 128 tokens / seq_len 16 = 8
    # sequences = accumulation 2 x dp 1 x micro_batch 4 (derived, as DeepSpeed does; the file's 2 yields).
    run = tmp_path / "run"
    result = run_driver("--config", str(config), "--log_dir", str(run), "--batch_size=0.125k",
                        "--gradient_accumulation=2", "--set", "training.steps=1")
    assert result.returncode == 0, result.stderr
    got = resolved(run)
    assert got["micro_batch"] == 4 and got["gradient_accumulation"] == 2 and got["global_batch_size"] == 8, got
    result = run_driver("--config", str(config), "--log_dir", str(tmp_path / "r2"), "--batch_size=12",
                        "--gradient_accumulation=8")
    assert result.returncode == 2
    assert re.search(r"^error: --batch_size \(12 sequences\) is not a whole number of micro-batches: 12 / "
                     r"\(--gradient_accumulation 8 x dp 1\) = 1\.5", result.stderr, re.M), result.stderr


def test_unknown_and_inapplicable_flags_exit_2_with_one_line(config):
    for flag, expected in (("--memory-fraction=0.8", "--memory-fraction does not apply"),
                           ("--model_type=13B", "model: section"), ("--zzz", "unknown flag --zzz")):
        result = run_driver("--config", str(config), flag)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ") and expected in result.stderr, \
            result.stderr
        assert result.stdout == ""
