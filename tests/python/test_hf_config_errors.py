"""`import --format hf` with a broken config.json (the inputs fuzzing found tracebacks for): a missing
key, a wrong type, a non-positive size, invalid JSON, non-UTF-8 bytes, a top level that is not an
object — each is one HfError line naming config.json and the key, never a KeyError or TypeError,
and nothing is written; the CLI exits 2 with that line. A safetensors index naming a file outside
the folder ('../x', an absolute path, a symbolic link out) is refused, never read."""
import json
import os
import subprocess
import sys

import pytest

from myriad import hf
from package_under_test import PYTHONPATH, REPO
from test_hf_tokenizer import llama_folder


def broken(tmp_path, edit):
    folder = llama_folder(str(tmp_path / "hf"), vocab=64)
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        values = json.load(f)
    text = edit(values)
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else json.dumps(values).encode())
    return folder


def drop(key):
    return lambda values: values.pop(key) and None


def put(key, value):
    return lambda values: values.__setitem__(key, value)


CASES = {
    "missing_layers": (drop("num_hidden_layers"), "has no 'num_hidden_layers'"),
    "missing_hidden": (drop("hidden_size"), "has no 'hidden_size'"),
    "string_size": (put("hidden_size", "8"), "'hidden_size' must be a positive integer, got \"8\""),
    "float_size": (put("num_attention_heads", 2.0), "'num_attention_heads' must be a positive integer"),
    "zero_layers": (put("num_hidden_layers", 0), "'num_hidden_layers' must be a positive integer, got 0"),
    "negative_vocab": (put("vocab_size", -3), "'vocab_size' must be a positive integer"),
    "bool_size": (put("intermediate_size", True), "'intermediate_size' must be a positive integer, got true"),
    "string_tie": (put("tie_word_embeddings", "yes"), "'tie_word_embeddings' must be true or false"),
    "list_rope": (put("rope_scaling", [1, 2]), "'rope_scaling' must be an object"),
    "number_eps": (put("rms_norm_eps", "1e-6"), "'rms_norm_eps' must be a positive number"),
    "not_json": (lambda values: b"{\"model_type\": \"llama\",", "is not valid JSON"),
    "not_utf8": (lambda values: b"{\"model_type\": \"ll\xffama\"}", "is not UTF-8 text"),
    "a_list": (lambda values: b"[1, 2, 3]", "must hold a JSON object, got list"),
    "deep": (lambda values: b"[" * 100000 + b"]" * 100000, "config.json"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_broken_config_json_is_one_error_naming_the_file_and_key(case, tmp_path):
    edit, fragment = CASES[case]
    folder = broken(tmp_path, edit)
    with pytest.raises(hf.HfError) as refusal:
        hf.import_hf(folder, str(tmp_path / "ck"), tokenizer="train:64")
    message = str(refusal.value)
    assert "config.json" in message and fragment in message, message
    assert "\n" not in message
    assert not os.path.exists(tmp_path / "ck")


def test_the_cli_prints_one_line_and_exits_2(tmp_path):
    folder = broken(tmp_path, drop("vocab_size"))
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    result = subprocess.run([sys.executable, "-m", "myriad.convert", "import", "--format", "hf", folder,
                             str(tmp_path / "ck"), "--tokenizer", "train:64"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "has no 'vocab_size'" in result.stderr and "config.json" in result.stderr


def sharded(tmp_path, weight_file):
    """The tiny LLaMA folder with its weights behind model.safetensors.index.json naming `weight_file`."""
    folder = llama_folder(str(tmp_path / "hf"), vocab=64)
    outside = tmp_path / "outside.safetensors"
    os.replace(os.path.join(folder, "model.safetensors"), outside)  # the right bytes, one folder up
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": {"model.norm.weight": weight_file}}, f)
    return folder, outside


@pytest.mark.parametrize("how", ["parent", "absolute", "symlink"])
def test_an_index_naming_a_file_outside_the_folder_is_refused_not_read(how, tmp_path):
    folder, outside = sharded(tmp_path, "../outside.safetensors")
    if how == "absolute":
        sharded_index = os.path.join(folder, "model.safetensors.index.json")
        with open(sharded_index, "w") as f:
            json.dump({"weight_map": {"model.norm.weight": str(outside)}}, f)
    if how == "symlink":
        os.symlink(outside, os.path.join(folder, "model-00001.safetensors"))
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"weight_map": {"model.norm.weight": "model-00001.safetensors"}}, f)
    with pytest.raises(hf.HfError) as refusal:
        hf.import_hf(folder, str(tmp_path / "ck"), tokenizer="train:64")
    message = str(refusal.value)
    assert "refusing to read it" in message and ("not a file name inside" in message or "symbolic link" in message)
    assert not os.path.exists(tmp_path / "ck")
