"""What a resumed run may trust, end to end through python/train.py on a tiny corpus and model:
it tokenizes with the tokenizer its checkpoint was trained with even when the corpus changed
(`data.tokenizer: train:N` never retrains under a checkpoint) and refuses another tokenizer
naming the fix; `--resume auto` passes over a damaged newest checkpoint for the newest intact one,
naming it and leaving it in place; a second fresh run into a logging.dir that holds another run's
metrics.jsonl and config.yaml is refused naming them, and loses nothing."""
import os
import re
import shutil
import subprocess
import sys

import myriad
from tiny_corpus import write_corpus
from package_under_test import DRIVER, PYTHONPATH

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

RESUME_YAML = """\
model: {{architecture: gpt2, vocab_size: 320, n_layer: 1, n_head: 2, n_embd: 32, context_length: 32}}
training: {{micro_batch: 2, gradient_accumulation: 1, seq_len: 32, steps: 2, lr: 3.0e-3, eval_batches: 1, \
eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
checkpoint: {{every: 2}}
logging: {{measure_peak: false, dir: {run}, every: 1}}
sample: {{tokens: 0}}
"""

PROBE = "the cat sees the ball. zebras quietly juggle purple umbrellas."


def run_resume_driver(config_path, *args):
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, DRIVER, "--config", str(config_path), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def tiny_resume_run(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    config = tmp_path / "run.yaml"
    config.write_text(RESUME_YAML.format(corpus=corpus, run=tmp_path / "run"))
    return config, corpus, tmp_path / "run"


def change_corpus(corpus):
    """Other words, so that a BPE trained on the new text has other merges and ids."""
    words = ["zebras", "quietly", "juggle", "purple", "umbrellas", "under", "bright", "lanterns", "while"]
    lines = [" ".join(words[(i * 7 + k) % len(words)] for k in range(6)) + "." for i in range(3000)]
    corpus.write_text("\n".join(lines) + "\n")


def test_a_resumed_run_tokenizes_a_changed_corpus_with_its_checkpoints_tokenizer(tmp_path):
    config, corpus, run = tiny_resume_run(tmp_path)
    first = run_resume_driver(config)
    assert first.returncode == 0, first.stderr
    trained = myriad.BpeTokenizer.load(str(run / "data" / "tokenizer.bpe"))
    change_corpus(corpus)
    resumed = run_resume_driver(config, "--resume", "auto", "--set", "training.steps=4")
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output
    assert "Iteration: 3/4" in resumed.stdout and "Iteration: 1/4" not in resumed.stdout, output
    assert "training a byte-level BPE" not in output, "the resumed run trained a new vocabulary:\n" + output
    assert re.search(r"tokenizing .* with the tokenizer of the checkpoint's run, .*step_00000002/tokenizer\.bpe",
                     output), output
    # The ids of a fixed text are those the checkpoint was trained with, in the cache and in the
    # resumed run's own checkpoint.
    ids = trained.encode(PROBE)
    assert myriad.BpeTokenizer.load(str(run / "data" / "tokenizer.bpe")).encode(PROBE) == ids
    assert myriad.BpeTokenizer.load(str(run / "checkpoints" / "step_00000004" / "tokenizer.bpe")).encode(PROBE) == ids


def test_resuming_under_another_tokenizer_is_refused_naming_both_and_the_fix(tmp_path):
    config, corpus, run = tiny_resume_run(tmp_path)
    first = run_resume_driver(config)
    assert first.returncode == 0, first.stderr
    other = tmp_path / "other.bpe"
    myriad.BpeTokenizer.train("zebras quietly juggle purple umbrellas under bright lanterns.\n" * 50, 300).save(
        str(other))
    refused = run_resume_driver(config, "--resume", "auto", "--set", "training.steps=4",
                                "--set", f"data.tokenizer=bpe:{other}")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    saved = run / "checkpoints" / "step_00000002" / "tokenizer.bpe"
    assert re.search(r"^error: .*was trained with another tokenizer than this run's: the checkpoint's has 320 "
                     r"tokens \(fnv1a64:[0-9a-f]{16}\), this run's 300 tokens \(fnv1a64:[0-9a-f]{16}\).*"
                     + re.escape(f"--set data.tokenizer=bpe:{saved}"), refused.stderr, re.M), refused.stderr
    assert "Iteration" not in refused.stdout
    # The fix it names works.
    fixed = run_resume_driver(config, "--resume", "auto", "--set", "training.steps=4",
                              "--set", f"data.tokenizer=bpe:{saved}")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "Iteration: 4/4" in fixed.stdout


def test_resume_auto_passes_over_a_corrupt_newest_checkpoint_naming_it(tmp_path):
    config, corpus, run = tiny_resume_run(tmp_path)
    first = run_resume_driver(config, "--set", "training.steps=4", "--set", "checkpoint.every=2")
    assert first.returncode == 0, first.stderr
    newest = run / "checkpoints" / "step_00000004"
    shard = newest / "rank_0.bin"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    resumed = run_resume_driver(config, "--resume", "auto", "--set", "training.steps=6", "--set",
                                "checkpoint.every=0")
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output
    warning = re.search(r"\[warning\] resume auto: .*", output)
    assert warning and "left in place" in warning.group(0), output
    assert re.search(re.escape(str(newest)) + r": .*fails its checksum", warning.group(0)), output
    assert re.search(r"resumed from .*step_00000002 at step 2", output), output
    assert "Iteration: 3/6" in resumed.stdout, output
    assert shard.read_bytes() == bytes(data), "the damaged checkpoint must be left as it was"


def test_resume_auto_with_no_intact_checkpoint_names_each_and_the_supervisor_shows_it(tmp_path):
    config, corpus, run = tiny_resume_run(tmp_path)
    first = run_resume_driver(config)
    assert first.returncode == 0, first.stderr
    shard = run / "checkpoints" / "step_00000002" / "rank_0.bin"
    data = bytearray(shard.read_bytes())
    data[8] ^= 0xFF
    shard.write_bytes(bytes(data))
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    supervised = subprocess.run(
        [sys.executable, "-m", "myriad.run", "--max-restarts", "1", "--backoff", "0", "--", sys.executable, DRIVER,
         "--config", str(config), "--resume", "auto", "--set", "training.steps=4"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert supervised.returncode == 2, supervised.stderr
    summary = "\n".join(line for line in supervised.stderr.splitlines() if "[myriad.run]" in line or
                        line.startswith("    "))
    assert re.search(r"attempt 1 failed: exit code 2; cause: .*none of the 1 checkpoint\(s\) in .* is intact", summary,
                     re.S), supervised.stderr


def test_a_second_fresh_run_into_the_same_logging_dir_is_refused_naming_the_files(tmp_path):
    config, corpus, run = tiny_resume_run(tmp_path)
    first = run_resume_driver(config)
    assert first.returncode == 0, first.stderr
    metrics = (run / "metrics.jsonl").read_bytes()
    config_yaml = (run / "config.yaml").read_text()
    second = run_resume_driver(config, "--set", f"checkpoint.dir={tmp_path / 'other_checkpoints'}")
    assert second.returncode == 2, second.stdout + second.stderr
    assert re.search(r"^error: \[rank 0\] the logging folder " + re.escape(str(run)) +
                     r" already holds another run's metrics\.jsonl.*config\.yaml.*--resume auto.*logging\.dir",
                     second.stderr, re.M), second.stderr
    assert "Iteration" not in second.stdout
    assert (run / "metrics.jsonl").read_bytes() == metrics, "the first run's metrics were appended to"
    assert (run / "config.yaml").read_text() == config_yaml, "the first run's config.yaml was overwritten"
    assert not (tmp_path / "other_checkpoints").exists()
    # Resuming the run in that folder appends to its metrics (steps after the resumed one).
    resumed = run_resume_driver(config, "--resume", "auto", "--set", "training.steps=3")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (run / "metrics.jsonl").read_bytes().startswith(metrics)
    shutil.rmtree(run)
