"""Checkpoint <-> safetensors (python -m myriad.convert): the exported file, parsed here with an
independent reader (struct + json + NumPy), holds every parameter of the engine under its name
and shape, bit for bit; importing it gives a step-0 checkpoint that an engine resumes with the
same parameters; truncated files and missing tensors are errors naming the file and tensor."""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import myriad
from tiny_corpus import write_corpus

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ENV = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))

YAML = """\
model: {{architecture: {arch}, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 32, block_size: 32}}
training: {{micro_batch: 4, gradient_accumulation: 1, seq_len: 32, steps: 4, lr: 3.0e-3, eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
logging: {{dir: {run}, level: warn, tensorboard: false}}
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
