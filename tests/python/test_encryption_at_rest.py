"""Encryption at rest end to end (docs/security.md, "Encryption at rest"). One clear and one
encrypted run of the same config (python/train.py; security.key_file) — trained to step 4, resumed
to 6 — then:
- every checkpoint file of the encrypted run is encrypted (mode 0600) and a search of every file
  it wrote for trained weights' bytes finds nothing, while the same search finds them in the clear
  run (so the search can fail);
- the encrypted resume equals the clear resume bit for bit (exported weights of step 6);
- resuming without the key, or with a wrong key, stops before training naming the key and the
  setting; an encrypted export reads back with the key, and `myriad keys decrypt` releases it in clear;
- resharding: the encrypted checkpoint resumes under mpirun with tensor parallelism (tp 2) to
  the same loss as the clear one;
- `myriad serve` serves the encrypted checkpoint with $MYRIAD_KEY_FILE (the clear run's greedy
  tokens) and refuses to start without it, naming the key;
- `myriad keys rotate` rewraps a checkpoint's files under a new key (ciphertext unchanged) and the
  run resumes with the new key alone;
- token shards: with security.encrypt_token_shards the run's token cache (shards, tokenizer) is
  rebuilt encrypted, holds none of the clear cache's token bytes and trains to the clear run's
  losses; without a key the setting stops the run; `myriad-data tokenize --encrypt` writes
  encrypted shards that `inspect` and a training run read with the key only."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import myriad
from myriad import audit, keys_command
from serve_process import Server, mpirun_launcher
from tiny_corpus import write_corpus
from package_under_test import DRIVER, PYTHONPATH

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MAGIC = b"MYRIADE1"
MARKER = ".myriad-checkpoint"
LOSS = re.compile(r"^Iteration: (\d+)/\d+ \| Loss: ([0-9.]+) ", re.M)

CONFIG = """\
model: {{architecture: gpt2, vocab_size: 320, n_layer: 1, n_head: 2, n_embd: 32, context_length: 32}}
training: {{micro_batch: 2, gradient_accumulation: 1, seq_len: 32, steps: 4, lr: 3.0e-3, eval_batches: 1, \
eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
checkpoint: {{every: 2}}
logging: {{measure_peak: false, dir: {run}, every: 1}}
sample: {{tokens: 0}}
"""


def driver(config, *args, env=None, launcher=()):
    environ = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    environ.pop("MYRIAD_KEY_FILE", None)
    environ.update(env or {})
    words = [*launcher, "-x", "PYTHONPATH"] if launcher else []
    return subprocess.run([*words, sys.executable, DRIVER, "--config", str(config), *args], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=300)


def setup_run(root, name):
    corpus = root / "corpus.txt"
    if not corpus.exists():
        write_corpus(corpus)
    config = root / f"{name}.yaml"
    config.write_text(CONFIG.format(corpus=corpus, run=root / name))
    return config, root / name


def exported(checkpoint, out, key_file=None):
    key = str(key_file) if key_file else ""
    myriad.export_safetensors(str(checkpoint), str(out), key_file=key)
    return myriad.read_safetensors(str(out), key_file=key)[0]


def weight_windows(tensors):
    """16-byte windows of trained float32 weights."""
    windows = []
    for name in sorted(tensors)[:4]:
        flat = np.ascontiguousarray(tensors[name], dtype=np.float32).ravel()
        windows += [flat[start:start + 4].tobytes() for start in (0, flat.size // 2)]
    return windows


def files_holding(root, windows):
    hits = []
    for folder, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                data = f.read()
            if any(w in data for w in windows):
                hits.append(os.path.join(folder, name))
    return hits


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The clear and the encrypted run, each trained to 4 and resumed to 6."""
    root = tmp_path_factory.mktemp("at_rest")
    key_file = root / "keys"
    keys_command.new_key(str(key_file), "k1")
    done = {"root": root, "key_file": key_file}
    for name, extra, env in (("clear", (), {}), ("secret", ("--set", f"security.key_file={key_file}"), {})):
        config, run = setup_run(root, name)
        first = driver(config, *extra, env=env)
        assert first.returncode == 0, first.stdout + first.stderr
        done[name + "_first"] = first.stdout
        resumed = driver(config, "--resume", "auto", "--set", "training.steps=6", *extra, env=env)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "Iteration: 5/6" in resumed.stdout and "Iteration: 1/6" not in resumed.stdout, resumed.stdout
        done[name] = (config, run, resumed.stdout)
    return done


def test_no_weight_lands_in_clear_and_the_resume_equals_the_clear_one_bit_for_bit(runs):
    root, key_file = runs["root"], runs["key_file"]
    _, secret_run, secret_out = runs["secret"]
    _, clear_run, clear_out = runs["clear"]
    for step in (2, 4, 6):
        folder = secret_run / "checkpoints" / f"step_{step:08d}"
        for name in os.listdir(folder):
            if name == MARKER:
                continue
            assert (folder / name).read_bytes().startswith(MAGIC), f"{folder / name} is not encrypted"
            assert os.stat(folder / name).st_mode & 0o077 == 0, f"{folder / name} is readable by others"
    secret = exported(secret_run / "checkpoints" / "step_00000006", root / "export-secret.safetensors", key_file)
    clear = exported(clear_run / "checkpoints" / "step_00000006", root / "export-clear.safetensors")
    assert (root / "export-secret.safetensors").read_bytes().startswith(MAGIC)
    assert sorted(secret) == sorted(clear)
    for name in clear:
        assert np.array_equal(secret[name], clear[name]), name
    assert LOSS.findall(secret_out) == LOSS.findall(clear_out)
    # An explicit release in clear: `myriad keys decrypt` gives the same tensors, readable without a key.
    released = subprocess.run([sys.executable, "-m", "myriad.cli", "keys", "decrypt",
                               str(root / "export-secret.safetensors"), str(root / "released.safetensors"),
                               "--key-file", str(key_file)],
                              env=dict(os.environ, PYTHONPATH=PYTHONPATH), capture_output=True, text=True, timeout=120)
    assert released.returncode == 0, released.stderr
    plain = myriad.read_safetensors(str(root / "released.safetensors"))[0]
    assert all(np.array_equal(plain[name], clear[name]) for name in clear)
    windows = weight_windows(clear)
    assert any(p.endswith("rank_0.bin") for p in files_holding(clear_run, windows))  # the search finds clear weights
    assert files_holding(secret_run, windows) == []
    assert files_holding(root / "export-secret.safetensors", windows) == []


def test_without_the_key_or_with_a_wrong_one_nothing_trains(runs):
    config, run, _ = runs["secret"]
    more = ("--resume", "auto", "--set", "training.steps=8")
    missing = driver(config, *more)
    output = missing.stdout + missing.stderr
    assert missing.returncode != 0
    assert "encrypted under key 'k1'" in output and "security.key_file" in output and "MYRIAD_KEY_FILE" in output, \
        output
    assert "Iteration" not in missing.stdout
    wrong = runs["root"] / "wrong-keys"
    wrong.write_text("key k1 " + "ab" * 32 + "\n")
    refused = driver(config, *more, "--set", f"security.key_file={wrong}")
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "does not unwrap with key 'k1'" in output, output
    assert "Iteration" not in refused.stdout
    assert not (run / "checkpoints" / "step_00000008").exists()


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not found")
def test_an_encrypted_checkpoint_reshards_under_tensor_parallelism(runs, tmp_path):
    key_file = runs["key_file"]
    losses = {}
    for name in ("clear", "secret"):
        config, run, _ = runs[name]
        copy = tmp_path / name
        shutil.copytree(run / "checkpoints", copy / "checkpoints")
        extra = ["--set", f"security.key_file={key_file}"] if name == "secret" else []
        result = driver(config, "--resume", "auto", "--set", "training.steps=7", "--set", "parallel.tp=2",
                        "--set", f"logging.dir={copy}", *extra, launcher=mpirun_launcher(2))
        assert result.returncode == 0, result.stdout + result.stderr
        losses[name] = LOSS.findall(result.stdout)
        assert [step for step, _ in losses[name]] == ["7"], result.stdout
    assert losses["secret"] == losses["clear"]
    assert (tmp_path / "secret" / "checkpoints" / "step_00000007" / "rank_1.bin").read_bytes().startswith(MAGIC)


def test_the_server_reads_an_encrypted_checkpoint_with_the_key_only(runs, monkeypatch):
    key_file = runs["key_file"]
    body = {"model": "m", "prompt": "the cat", "max_tokens": 8, "temperature": 0}
    with Server("--checkpoint", str(runs["clear"][1] / "checkpoints"), "--model-name", "m") as s:
        status, clear_text, _ = s.post(body)
        assert status == 200, clear_text
        s.stop()
    with pytest.raises(RuntimeError, match=r"encrypted under key 'k1'.*MYRIAD_KEY_FILE"):
        Server("--checkpoint", str(runs["secret"][1] / "checkpoints"), "--model-name", "m")
    monkeypatch.setenv("MYRIAD_KEY_FILE", str(key_file))
    with Server("--checkpoint", str(runs["secret"][1] / "checkpoints"), "--model-name", "m") as s:
        status, secret_text, _ = s.post(body)
        assert status == 200, secret_text
        s.stop()
    assert json.loads(secret_text)["choices"][0]["text"] == json.loads(clear_text)["choices"][0]["text"]


def test_keys_rotate_rewraps_a_checkpoint_without_touching_its_ciphertext(tmp_path):
    key_file, audit_key = tmp_path / "keys", tmp_path / "audit.key"
    keys_command.new_key(str(key_file), "old")
    audit_key.write_bytes(os.urandom(32))
    audited = {"MYRIAD_AUDIT_KEY_FILE": str(audit_key)}
    config, run = setup_run(tmp_path, "rotating")
    first = driver(config, "--set", "training.steps=2", env={"MYRIAD_KEY_FILE": str(key_file), **audited})
    assert first.returncode == 0, first.stdout + first.stderr
    checkpoint = run / "checkpoints" / "step_00000002"
    before = {name: (checkpoint / name).read_bytes() for name in os.listdir(checkpoint)}
    assert keys_command.new_key(str(key_file), "new") == "new"
    rotated = subprocess.run([sys.executable, "-m", "myriad.cli", "keys", "rotate", str(run / "checkpoints"),
                              "--key-file", str(key_file)], env=dict(os.environ, PYTHONPATH=PYTHONPATH, **audited),
                             capture_output=True, text=True, timeout=120)
    assert rotated.returncode == 0, rotated.stderr
    assert "rewrapped under 'new'" in rotated.stdout, rotated.stdout
    # The run's audit log ends with the rotation (key ids only) and still verifies.
    log = run / "audit.jsonl"
    last = json.loads(log.read_text().splitlines()[-1])
    assert last["action"] == "keys.rotated" and last["details"]["to_key_id"] == "new"
    assert last["details"]["from_key_ids"] == ["old"] and last["details"]["rewrapped"] == len(before) - 1
    assert audit.verify(log, audit.load_key(audit_key)).ok
    assert key_file.read_text().split("key new ")[1][:64] not in log.read_text()
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


def modes_under(root):
    """{path: permission bits} of every file and folder under root (root included)."""
    found = {str(root): os.stat(root).st_mode & 0o777}
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            path = os.path.join(folder, name)
            found[path] = os.stat(path).st_mode & 0o777
    return found


def test_a_run_writes_its_artefacts_for_its_owner_only_unless_configured(runs, tmp_path):
    _, run, _ = runs["clear"]  # trained with the default security.umask 077
    modes = modes_under(run)
    assert any(p.endswith("rank_0.bin") for p in modes) and any(p.endswith("metrics.jsonl") for p in modes)
    shared = {p: oct(m) for p, m in modes.items() if m & 0o077}
    assert shared == {}, f"readable by group or others: {shared}"
    assert modes[str(run)] == 0o700
    config, _ = setup_run(tmp_path, "shared")
    result = driver(config, "--set", "training.steps=2", "--set", "security.umask=022")
    assert result.returncode == 0, result.stderr
    modes = modes_under(tmp_path / "shared")
    assert modes[str(tmp_path / "shared" / "metrics.jsonl")] == 0o644
    assert modes[str(tmp_path / "shared")] == 0o755
    bad = driver(config, "--set", "security.umask=999")
    assert bad.returncode == 2 and "security.umask" in bad.stderr, bad.stderr


def test_token_shards_encrypted_train_to_the_clear_losses_and_need_the_key(runs, tmp_path):
    key_file = runs["key_file"]
    _, clear_run, _ = runs["clear"]
    config, _ = setup_run(tmp_path, "sealed")
    cache = tmp_path / "cache"
    keyed = ("--set", f"security.key_file={key_file}", "--set", f"data.cache_dir={cache}")
    refused = driver(config, "--set", "security.encrypt_token_shards=true")
    assert refused.returncode != 0 and "security.encrypt_token_shards" in refused.stderr + refused.stdout
    assert "Iteration" not in refused.stdout
    # A cache built in clear, then the same run asking for encrypted shards: rebuilt encrypted.
    built_clear = driver(config, *keyed, "--set", "training.steps=1", "--set", f"logging.dir={tmp_path / 'first'}")
    assert built_clear.returncode == 0, built_clear.stdout + built_clear.stderr
    assert not (cache / "train_000000.bin").read_bytes().startswith(MAGIC)
    sealed = driver(config, *keyed, "--set", "security.encrypt_token_shards=true")
    assert sealed.returncode == 0, sealed.stdout + sealed.stderr
    assert "rebuilding the token cache" in sealed.stdout + sealed.stderr
    cached = sorted(p for p in os.listdir(cache) if p.endswith(".bin") or p == "tokenizer.bpe")
    assert any(p.startswith("val_") for p in cached) and "tokenizer.bpe" in cached
    for name in cached:
        assert (cache / name).read_bytes().startswith(MAGIC), f"{name} is not encrypted"
    assert LOSS.findall(sealed.stdout) == LOSS.findall(runs["clear_first"])
    # 48 bytes of the clear cache's token ids: in its shard, and in no file of the encrypted cache.
    clear_tokens = (clear_run / "data" / "train_000000.bin").read_bytes()
    windows = [clear_tokens[at:at + 48] for at in (64, len(clear_tokens) // 2)]
    assert files_holding(clear_run / "data", windows)
    assert files_holding(cache, windows) == []

    # myriad-data tokenize --encrypt: shards readable with the key only, trained on as data.path.
    cli = os.path.join(os.environ.get("BUILD_DIR", os.path.join(REPO, "build")), "tools", "myriad-data")
    tokenizer = clear_run / "data" / "tokenizer.bpe"
    shards = tmp_path / "shards"
    made = subprocess.run([cli, "tokenize", "--input", str(tmp_path / "corpus.txt"), "--output", str(shards),
                           "--tokenizer", f"bpe:{tokenizer}", "--val-fraction", "0.1", "--val-split", "tail",
                           "--encrypt", "--key-file", str(key_file)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    assert all((shards / p).read_bytes().startswith(MAGIC) for p in os.listdir(shards) if p.endswith(".bin"))
    info = myriad.data.inspect(str(shards / "train_000000.bin"), verify=True, key_file=str(key_file))
    assert info["encrypted"] and info["tokens"] > 0
    py_made = myriad.data.tokenize([str(tmp_path / "corpus.txt")], str(tmp_path / "py_shards"), f"bpe:{tokenizer}",
                                   val_fraction=0.1, val_split="tail", encrypt=True, key_file=str(key_file))
    py_first = py_made["train_shards"][0]["path"]
    assert open(py_first, "rb").read().startswith(MAGIC)
    assert myriad.data.inspect(py_first, key_file=str(key_file))["tokens"] == info["tokens"]
    shown = subprocess.run([cli, "inspect", str(shards), "--verify", "--key-file", str(key_file)],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and ", encrypted |" in shown.stdout, shown.stdout + shown.stderr
    locked = subprocess.run([cli, "inspect", str(shards)], capture_output=True, text=True, timeout=120,
                            env={k: v for k, v in os.environ.items() if k != "MYRIAD_KEY_FILE"})
    assert locked.returncode != 0 and "encrypted under key 'k1'" in locked.stderr, locked.stderr
    trained = driver(config, "--set", f"data.path={shards}", "--set", f"data.tokenizer=bpe:{tokenizer}",
                     "--set", "training.steps=2", "--set", f"logging.dir={tmp_path / 'from_shards'}",
                     env={"MYRIAD_KEY_FILE": str(key_file)})
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert "Iteration: 2/2" in trained.stdout
    # Rotation rewraps the shards too: readable with the new key alone.
    rotated_keys = tmp_path / "rotated-keys"
    shutil.copy(key_file, rotated_keys)
    keys_command.new_key(str(rotated_keys), "k2")
    keys_command.rotate([str(shards)], str(rotated_keys), out=open(os.devnull, "w"))
    only_new = tmp_path / "only-new"
    only_new.write_text("".join(line + "\n" for line in rotated_keys.read_text().splitlines()
                                if not line.startswith("key k1")))
    after = subprocess.run([cli, "inspect", str(shards), "--verify", "--key-file", str(only_new)],
                           capture_output=True, text=True, timeout=120)
    assert after.returncode == 0, after.stdout + after.stderr
    assert myriad.encrypted_file_key_id(str(shards / "train_000000.bin")) == "k2"
