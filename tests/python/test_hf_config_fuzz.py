"""A fuzz loop over `import --format hf`'s config.json reader, which is Python only
(myriad/hf.py: _read_hf_config and the model mapping of _gpt2_from_hf / _llama_from_hf; the C++
fuzz targets in tests/fuzz/ cover the C++ readers). Seeded, so every run tries the same inputs:
values of every type put into (and keys dropped from) a valid GPT-2 and LLaMA config.json, and
random byte edits of their text. Each must load or fail as one HfError naming config.json, never
another exception (the loop found: an integer of more than 4300 digits raised Python's ValueError
from json)."""
import json
import os
import random

import numpy as np
import pytest

import myriad
from myriad import hf
from test_hf_tokenizer import llama_folder

FUZZ_VALUES = [None, True, False, 0, -1, 1, 2, 8, 16, 2**70, 1.5, -0.5, float("inf"), float("nan"), "", "8",
               "llama", "gpt2", "silu", "gelu_new", [], [1, 2], {}, {"rope_type": "yarn"}, {"rope_theta": "x"},
               {"rope_type": "default", "rope_theta": 500000.0}]
FUZZ_KEYS = sorted(hf._HfConfig.INTS | hf._HfConfig.NUMBERS | hf._HfConfig.BOOLS | hf._HfConfig.STRINGS
                   | hf._HfConfig.MAPS | {"unknown_key"})
ITERATIONS = 300


def gpt2_folder(folder, vocab=64, seed=0):
    """A tiny GPT-2 model folder (config.json + model.safetensors)."""
    rng = np.random.default_rng(seed)
    C, T, p = 8, 16, "transformer.h.0."
    shapes = {"transformer.wte.weight": (vocab, C), "transformer.wpe.weight": (T, C),
              "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,),
              p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
              p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
              p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
              p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)}
    shapes.update({p + f"ln_{i}.{n}": (C,) for i in (1, 2) for n in ("weight", "bias")})
    os.makedirs(folder, exist_ok=True)
    tensors = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    myriad.write_safetensors(os.path.join(folder, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "vocab_size": vocab, "n_embd": C, "n_layer": 1, "n_head": 2,
                   "n_positions": T, "activation_function": "gelu_new"}, f)
    return folder


def read_mapped(folder, tensors, text):
    """config.json := text, then what import_hf does with it before the tokenizer: read, map."""
    path = os.path.join(folder, "config.json")
    with open(path, "wb") as f:
        f.write(text)
    cfg = hf._read_hf_config(path)
    kind = cfg.get("model_type")
    if kind == "gpt2":
        hf._gpt2_from_hf(cfg, dict(tensors), folder)
    elif kind == "llama":
        hf._llama_from_hf(cfg, dict(tensors), folder)


def structural_edit(rng, values):
    values = dict(values)
    for _ in range(rng.randint(1, 3)):
        if values and rng.random() < 0.25:
            values.pop(rng.choice(sorted(values)))
        else:
            values[rng.choice(FUZZ_KEYS + sorted(values))] = rng.choice(FUZZ_VALUES)
    return json.dumps(values).encode()


def byte_edit(rng, text):
    data = bytearray(text)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data) + 1)
        action = rng.random()
        if action < 0.4 and at < len(data):
            data[at] = rng.randrange(256)
        elif action < 0.7:
            data[at:at] = bytes(rng.choice([b"9" * 5000, b"[" * 3000, b"\xff", b"-", b"1e999", b"\"", b",", b"}"]))
        else:
            del data[at:at + rng.randint(1, 8)]
    return bytes(data)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_fuzzed_config_json_loads_or_is_one_hf_error(family, tmp_path):
    folder = str(tmp_path / family)
    (gpt2_folder if family == "gpt2" else llama_folder)(folder, vocab=64)
    with open(os.path.join(folder, "config.json"), "rb") as f:
        valid = f.read()
    tensors = hf._read_hf_tensors(folder)
    read_mapped(folder, tensors, valid)  # the unedited file maps
    rng = random.Random(f"hf-config-{family}")
    outcomes = {"loaded": 0, "refused": 0}
    for i in range(ITERATIONS):
        text = structural_edit(rng, json.loads(valid)) if i % 2 == 0 else byte_edit(rng, valid)
        try:
            read_mapped(folder, tensors, text)
            outcomes["loaded"] += 1
        except hf.HfError as e:
            message = str(e)
            assert "\n" not in message and message.startswith("import --format hf:"), (text[:200], message)
            outcomes["refused"] += 1
        except Exception as e:  # noqa: BLE001 - any other exception is the bug this loop looks for
            pytest.fail(f"input {i} ({text[:120]!r}...): {type(e).__name__}: {e}"[:600])
    assert outcomes["refused"] > ITERATIONS // 4 and outcomes["loaded"] > 0, outcomes


def test_an_integer_of_5000_digits_is_an_hf_error(tmp_path):
    # Was: ValueError "Exceeds the limit (4300 digits) for integer string conversion" (a traceback).
    folder = llama_folder(str(tmp_path / "hf"), vocab=64)
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write('{"model_type": "llama", "vocab_size": ' + "9" * 5000 + "}")
    with pytest.raises(hf.HfError, match="config.json is not valid JSON"):
        hf._read_hf_config(os.path.join(folder, "config.json"))
