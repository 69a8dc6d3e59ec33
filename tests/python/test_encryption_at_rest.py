"""Encryption at rest end to end (docs/security.md, "Encryption at rest"): a real training run with
security.key_file writes every checkpoint file encrypted — a search of every file it wrote for a
trained weight's bytes finds nothing, while the same search finds them in a run without the key
(so the search can fail); the run resumes with the key, and stops before training, naming the key
and the setting, without it or with a wrong one; exports are encrypted and read back with the key;
`myriad keys rotate` rewraps a checkpoint's files under a new key (ciphertext unchanged) and the
run resumes with the new key alone."""
import os
import subprocess
import sys

import numpy as np

import myriad
from myriad import keys_command
from tiny_corpus import write_corpus
from package_under_test import DRIVER, PYTHONPATH

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MAGIC = b"MYRIADE1"

CONFIG = """\
model: {{architecture: gpt2, vocab_size: 320, n_layer: 1, n_head: 2, n_embd: 32, context_length: 32}}
training: {{micro_batch: 2, gradient_accumulation: 1, seq_len: 32, steps: 4, lr: 3.0e-3, eval_batches: 1, \
eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
checkpoint: {{every: 2}}
logging: {{measure_peak: false, dir: {run}, every: 1}}
sample: {{tokens: 0}}
"""


def driver(config, *args, env=None):
    environ = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    environ.pop("MYRIAD_KEY_FILE", None)
    environ.update(env or {})
    return subprocess.run([sys.executable, DRIVER, "--config", str(config), *args], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=300)


def setup_run(tmp_path, name):
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        write_corpus(corpus)
    config = tmp_path / f"{name}.yaml"
    config.write_text(CONFIG.format(corpus=corpus, run=tmp_path / name))
    return config, tmp_path / name


def trained_weight_windows(checkpoint, key_file, out):
    """16-byte windows of trained float32 weights (the exported token embedding and first layer)."""
    myriad.export_safetensors(str(checkpoint), str(out), key_file=str(key_file) if key_file else "")
    tensors, _ = myriad.read_safetensors(str(out), key_file=str(key_file) if key_file else "")
    windows = []
    for name in sorted(tensors)[:4]:
        flat = np.ascontiguousarray(tensors[name], dtype=np.float32).ravel()
        for start in (0, flat.size // 2):
            windows.append(flat[start:start + 4].tobytes())
    return windows


def files_holding(root, windows):
    hits = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                data = f.read()
            if any(w in data for w in windows):
                hits.append(path)
    return hits


def test_an_encrypted_run_writes_no_weight_in_clear_and_resumes_only_with_its_key(tmp_path):
    key_file = tmp_path / "keys"
    keys_command.new_key(str(key_file), "k1")
    assert os.stat(key_file).st_mode & 0o777 == 0o600
    config, run = setup_run(tmp_path, "secret")
    first = driver(config, "--set", f"security.key_file={key_file}")
    assert first.returncode == 0, first.stdout + first.stderr
    checkpoints = run / "checkpoints"
    final = checkpoints / "step_00000004"
    for folder in (checkpoints / "step_00000002", final):
        for name in os.listdir(folder):
            data = (folder / name).read_bytes()
            if name == ".myriad-checkpoint":
                continue
            assert data.startswith(MAGIC), f"{folder / name} is not encrypted"
            assert os.stat(folder / name).st_mode & 0o077 == 0, f"{folder / name} readable by others"
    windows = trained_weight_windows(final, key_file, tmp_path / "secret-export.safetensors")
    assert (tmp_path / "secret-export.safetensors").read_bytes().startswith(MAGIC)
    assert files_holding(run, windows) == []
    assert files_holding(tmp_path / "secret-export.safetensors", windows) == []

    # The same search finds the weights of a run in clear: it can fail.
    clear_config, clear_run = setup_run(tmp_path, "clear")
    clear = driver(clear_config)
    assert clear.returncode == 0, clear.stderr
    clear_windows = trained_weight_windows(clear_run / "checkpoints" / "step_00000004", None,
                                           tmp_path / "clear-export.safetensors")
    assert any(p.endswith("rank_0.bin") for p in files_holding(clear_run, clear_windows))

    # Resume: with the key it goes on; without it, or with a wrong key, it stops before training.
    more = ("--resume", "auto", "--set", "training.steps=6")
    resumed = driver(config, *more, env={"MYRIAD_KEY_FILE": str(key_file)})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "Iteration: 5/6" in resumed.stdout and "Iteration: 1/6" not in resumed.stdout, resumed.stdout
    assert (checkpoints / "step_00000006" / "manifest.json").read_bytes().startswith(MAGIC)
    missing = driver(config, *more, "--set", "training.steps=8")
    output = missing.stdout + missing.stderr
    assert missing.returncode != 0
    assert "encrypted under key 'k1'" in output and "security.key_file" in output and "MYRIAD_KEY_FILE" in output, \
        output
    assert "Iteration" not in missing.stdout
    wrong = tmp_path / "wrong-keys"
    wrong.write_text("key k1 " + "ab" * 32 + "\n")
    refused = driver(config, *more, "--set", "training.steps=8", "--set", f"security.key_file={wrong}")
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "does not unwrap with key 'k1'" in output, output
    assert "Iteration" not in refused.stdout
    assert not (checkpoints / "step_00000008").exists()


def test_keys_rotate_rewraps_a_checkpoint_without_touching_its_ciphertext(tmp_path):
    key_file = tmp_path / "keys"
    keys_command.new_key(str(key_file), "old")
    config, run = setup_run(tmp_path, "rotating")
    first = driver(config, "--set", "training.steps=2", env={"MYRIAD_KEY_FILE": str(key_file)})
    assert first.returncode == 0, first.stdout + first.stderr
    checkpoint = run / "checkpoints" / "step_00000002"
    before = {name: (checkpoint / name).read_bytes() for name in os.listdir(checkpoint)}
    assert keys_command.new_key(str(key_file), "new") == "new"
    rotated = subprocess.run([sys.executable, "-m", "myriad.cli", "keys", "rotate", str(run / "checkpoints"),
                              "--key-file", str(key_file)], env=dict(os.environ, PYTHONPATH=PYTHONPATH),
                             capture_output=True, text=True, timeout=120)
    assert rotated.returncode == 0, rotated.stderr
    assert "rewrapped under 'new'" in rotated.stdout, rotated.stdout
    header = 8 + 160
    for name, old in before.items():
        now = (checkpoint / name).read_bytes()
        if old.startswith(MAGIC):
            assert myriad.encrypted_file_key_id(str(checkpoint / name)) == "new"
            assert now[header:] == old[header:], f"{name}: the ciphertext changed"
            assert now[:header] != old[:header]
    # Only the new key left: the rotated checkpoint resumes.
    lines = [line for line in key_file.read_text().splitlines() if not line.startswith("key old")]
    key_file.write_text("\n".join(lines) + "\n")
    resumed = driver(config, "--resume", "auto", "--set", "training.steps=4", "--set", f"security.key_file={key_file}")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "Iteration: 3/4" in resumed.stdout
