"""Checkpoint <-> safetensors (python -m myriad.convert): the exported file, parsed here with an
independent reader (struct + json + NumPy), holds every parameter of the engine under its name
and shape, bit for bit; importing it gives a step-0 checkpoint that an engine resumes with the
same parameters; truncated files and missing tensors are errors naming the file and tensor."""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import myriad
from tiny_corpus import write_corpus
from package_under_test import DRIVER, PYTHONPATH

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ENV = dict(os.environ, PYTHONPATH=PYTHONPATH)

YAML = """\
model: {{architecture: {arch}, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 32, context_length: 32}}
training: {{micro_batch: 4, gradient_accumulation: 1, seq_len: 32, steps: 4, lr: 3.0e-3, eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
logging: {{measure_peak: false, dir: {run}, level: warn, tensorboard: false}}
"""


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        assert entry["dtype"] == "F32"
        begin, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype="<f4").reshape(entry["shape"])
    return tensors, metadata


def convert(*args):
    return subprocess.run([sys.executable, "-m", "myriad.convert", *map(str, args)], env=ENV, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_export_then_import_round_trips_every_parameter(tmp_path, arch):
    corpus = write_corpus(tmp_path / "corpus.txt")
    config_path = tmp_path / "run.yaml"
    config_path.write_text(YAML.format(arch=arch, corpus=corpus, run=tmp_path / "run"))
    config = myriad.Config.from_file(str(config_path))
    engine = myriad.Engine(config)
    for _ in range(4):
        engine.step()
    checkpoint = engine.save()
    params = {name: t.numpy().copy() for name, t in engine.parameters().items()}

    exported = convert("export", checkpoint, tmp_path / "model.safetensors")
    assert exported.returncode == 0, exported.stderr
    tensors, metadata = read_safetensors(tmp_path / "model.safetensors")
    assert set(tensors) == set(params)
    for name, value in params.items():
        assert tensors[name].shape == value.shape and np.array_equal(tensors[name], value), name
    assert metadata["producer"] == "myriad" and metadata["step"] == "4"
    assert (tmp_path / "model.yaml").read_text().startswith("# myriad")

    imported = convert("import", tmp_path / "model.safetensors", tmp_path / "model.yaml", tmp_path / "imported")
    assert imported.returncode == 0, imported.stderr
    path = imported.stdout.strip()
    assert path.endswith("step_00000000")
    fresh = myriad.Engine(myriad.Config.from_file(str(config_path)))
    fresh.load(path)
    assert fresh.step_count == 0
    for name, value in fresh.parameters().items():
        assert np.array_equal(value.numpy(), params[name]), name


def test_bad_files_are_clear_errors(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    config_path = tmp_path / "run.yaml"
    config_path.write_text(YAML.format(arch="gpt2", corpus=corpus, run=tmp_path / "run"))
    engine = myriad.Engine(myriad.Config.from_file(str(config_path)))
    checkpoint = engine.save()
    assert convert("export", checkpoint, tmp_path / "m.safetensors").returncode == 0
    data = (tmp_path / "m.safetensors").read_bytes()
    (tmp_path / "truncated.safetensors").write_bytes(data[:len(data) // 2])
    result = convert("import", tmp_path / "truncated.safetensors", tmp_path / "m.yaml", tmp_path / "out")
    assert result.returncode == 2 and "truncated.safetensors" in result.stderr and "truncated" in result.stderr
    tensors, metadata = read_safetensors(tmp_path / "m.safetensors")
    # Rewrite without one parameter (a minimal writer here, independent of myriad's).
    del tensors["wpe"]
    header, offset, blobs = {}, 0, []
    for name, value in tensors.items():
        blob = np.ascontiguousarray(value, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(value.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    (tmp_path / "missing.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    result = convert("import", tmp_path / "missing.safetensors", tmp_path / "m.yaml", tmp_path / "out2")
    assert result.returncode == 2 and "lacks parameter 'wpe'" in result.stderr, result.stderr
    assert not (tmp_path / "out2").exists()
    # __metadata__ whose values are not strings (the format says string to string): a myriad
    # error naming the file and the entry, not a raw JSON type error.
    header = {"__metadata__": {"step": 4, "producer": "x"}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
    text = json.dumps(header).encode()
    (tmp_path / "meta.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + b"\0\0\0\0")
    result = convert("import", tmp_path / "meta.safetensors", tmp_path / "m.yaml", tmp_path / "out3")
    assert result.returncode == 2 and "meta.safetensors" in result.stderr, result.stderr
    assert "__metadata__ entry 'step' must be a string" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not found")
def test_the_documented_recipe_runs_verbatim(tmp_path):
    """docs/checkpoints.md's three lines after a data-parallel run of two ranks: export, import,
    train from the import — in the same working directory as the source run, which must neither
    collide with the source run's folders nor carry its data-parallel degree."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    config_path = tmp_path / "gpt2_tiny.yaml"
    config_path.write_text(YAML.format(arch="gpt2", corpus=corpus, run="runs/gpt2_tiny")
                           .replace("micro_batch: 4, gradient_accumulation: 1",
                                    "micro_batch: 2, gradient_accumulation: 2"))
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    source = subprocess.run(
        ["mpirun", "-np", "2", *root, "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-x", "PYTHONPATH",
         sys.executable, DRIVER, "--config", str(config_path),
         "--set", "sample.tokens=0"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert source.returncode == 0, source.stdout + source.stderr
    checkpoints = tmp_path / "runs" / "gpt2_tiny" / "checkpoints"
    before = sorted(os.listdir(checkpoints))
    assert "step_00000004" in before

    def run(*command):
        result = subprocess.run(list(command), cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, " ".join(command) + "\n" + result.stdout + result.stderr
        return result

    run(sys.executable, "-m", "myriad.convert", "export", "runs/gpt2_tiny/checkpoints/step_00000004",
        "model.safetensors")
    run(sys.executable, "-m", "myriad.convert", "import", "model.safetensors", "model.yaml", "imported/")
    trained = run(sys.executable, DRIVER, "--config", "model.yaml", "--resume",
                  "imported/step_00000000", "--set", "sample.tokens=0")
    assert "Val Loss: " in trained.stdout
    assert sorted(os.listdir(checkpoints)) == before, "the import's run wrote into the source run's checkpoints"
    assert (tmp_path / "runs" / "model" / "checkpoints" / "step_00000004" / "manifest.json").exists()
    # The portable config: the launch decides dp; the global batch (2 x 2 x 2 sequences) stays.
    text = (tmp_path / "model.yaml").read_text()
    assert "  dp: 0\n" in text and "  global_batch_size: 8\n" in text and "  dir: \"runs/model\"\n" in text
