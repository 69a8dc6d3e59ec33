"""Hugging Face interchange: myriad checkpoints <-> `transformers` model folders (GPT-2 and LLaMA).

export_hf(checkpoint_dir, out_dir) writes what `AutoModelForCausalLM.from_pretrained(out_dir)` loads:
config.json (GPT2LMHeadModel or LlamaForCausalLM), model.safetensors under the library's tensor
names and layouts, and the tokenizer files when the run used GPT-2's tokenizer (gpt2:<dir>).
import_hf(hf_dir, checkpoint_root) reads such a folder (one model.safetensors or a sharded set with
model.safetensors.index.json) into a step-0 myriad checkpoint and writes the run config beside it,
with the model's tokenizer (myriad/hf_tokenizer.py) or a refusal — never a silently new one.

Layouts (myriad's Linear weights are (out, in), as torch.nn.Linear):
- GPT-2: Hugging Face's Conv1D stores (in, out): every attention / MLP weight is transposed; the
  fused c_attn holds q | k | v column blocks, as myriad's qkv rows; the head is tied to wte (or
  lm_head.weight when tie_word_embeddings is false).
- LLaMA: q_proj, k_proj, v_proj (or a fused qkv_proj) are the row blocks of myriad's qkv; gate_proj,
  up_proj (or a fused gate_up_proj), down_proj; RoPE is the rotate-half convention on both sides,
  so no permutation.
- Vocabulary: myriad pads embedding rows to a multiple of 64; export writes model.vocab_size rows,
  import takes the folder's vocab_size (padded or not) as model.vocab_size.
Anything the other side cannot represent is refused naming it (a mixture-of-experts or
block-sparse model, LLaMA with biases, grouped-query GPT-2, rope scaling, other activations); a
tensor name that does not belong to the model, or a missing one, is an error naming them — never
a partial load.
"""
import json
import os
import shutil
import tempfile

import numpy as np

from . import _myriad
from .config_values import model_in_use
from .hf_tokenizer import TokenizerError, choose_tokenizer

# Buffers some GPT-2 / LLaMA files carry that are not parameters (recomputed by the model).
_IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")


class HfError(ValueError):
    """A folder or checkpoint that cannot be converted; the message names the file and tensor."""


def checkpoint_tensors(checkpoint_dir):
    """Full parameters (myriad names) and the run config of a checkpoint."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.safetensors")
        _myriad.export_safetensors(checkpoint_dir, path)
        tensors, metadata = _myriad.read_safetensors(path)
    config = _myriad.Config.from_string(metadata["config"], checkpoint_dir + "/manifest.json config")
    return tensors, config


def _require(condition, message):
    if not condition:
        raise HfError(message)


# ---------------------------------------------------------------------------------------------
# export


def _gpt2_hf(tensors, m):
    C = m["n_embd"]
    out = {"transformer.wte.weight": tensors["wte"][:m["vocab_size"]], "transformer.wpe.weight": tensors["wpe"]}

    def bias(name, width):
        # A model without linear biases (model.bias false) exports zeros for them; its LayerNorms
        # keep trained biases whatever model.bias says, so a tensor that exists is always written.
        return tensors[name] if name in tensors else np.zeros(width, np.float32)

    for i in range(m["n_layer"]):
        b, h = f"blocks.{i}.", f"transformer.h.{i}."
        out[h + "ln_1.weight"] = tensors[b + "norm1.weight"]
        out[h + "ln_1.bias"] = bias(b + "norm1.bias", C)
        out[h + "attn.c_attn.weight"] = tensors[b + "attn.qkv.weight"].T
        out[h + "attn.c_attn.bias"] = bias(b + "attn.qkv.bias", 3 * C)
        out[h + "attn.c_proj.weight"] = tensors[b + "attn.proj.weight"].T
        out[h + "attn.c_proj.bias"] = bias(b + "attn.proj.bias", C)
        out[h + "ln_2.weight"] = tensors[b + "norm2.weight"]
        out[h + "ln_2.bias"] = bias(b + "norm2.bias", C)
        out[h + "mlp.c_fc.weight"] = tensors[b + "mlp.fc.weight"].T
        out[h + "mlp.c_fc.bias"] = bias(b + "mlp.fc.bias", m["ffn_hidden"])
        out[h + "mlp.c_proj.weight"] = tensors[b + "mlp.proj.weight"].T
        out[h + "mlp.c_proj.bias"] = bias(b + "mlp.proj.bias", C)
    out["transformer.ln_f.weight"] = tensors["norm_f.weight"]
    out["transformer.ln_f.bias"] = bias("norm_f.bias", C)
    if not m["tie_embeddings"]:
        out["lm_head.weight"] = tensors["lm_head.weight"][:m["vocab_size"]]
    config = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": m["vocab_size"],
        "n_positions": m["context_length"], "n_embd": C, "n_layer": m["n_layer"], "n_head": m["n_head"],
        "n_inner": m["ffn_hidden"], "activation_function": "gelu_new", "layer_norm_epsilon": m["norm_eps"],
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "scale_attn_weights": True,
        "tie_word_embeddings": m["tie_embeddings"], "torch_dtype": "float32",
    }
    return out, config


def _llama_hf(tensors, m):
    D = m["head_dim"]
    q, kv = m["n_head"] * D, m["n_kv_head"] * D
    out = {"model.embed_tokens.weight": tensors["wte"][:m["vocab_size"]]}
    for i in range(m["n_layer"]):
        b, h = f"blocks.{i}.", f"model.layers.{i}."
        qkv = tensors[b + "attn.qkv.weight"]
        out[h + "input_layernorm.weight"] = tensors[b + "norm1.weight"]
        out[h + "self_attn.q_proj.weight"] = qkv[:q]
        out[h + "self_attn.k_proj.weight"] = qkv[q:q + kv]
        out[h + "self_attn.v_proj.weight"] = qkv[q + kv:]
        out[h + "self_attn.o_proj.weight"] = tensors[b + "attn.proj.weight"]
        out[h + "post_attention_layernorm.weight"] = tensors[b + "norm2.weight"]
        out[h + "mlp.gate_proj.weight"] = tensors[b + "mlp.gate.weight"]
        out[h + "mlp.up_proj.weight"] = tensors[b + "mlp.up.weight"]
        out[h + "mlp.down_proj.weight"] = tensors[b + "mlp.down.weight"]
    out["model.norm.weight"] = tensors["norm_f.weight"]
    if not m["tie_embeddings"]:
        out["lm_head.weight"] = tensors["lm_head.weight"][:m["vocab_size"]]
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": m["vocab_size"],
        "hidden_size": m["n_embd"], "intermediate_size": m["ffn_hidden"], "num_hidden_layers": m["n_layer"],
        "num_attention_heads": m["n_head"], "num_key_value_heads": m["n_kv_head"], "head_dim": D,
        "max_position_embeddings": m["context_length"], "rms_norm_eps": m["norm_eps"], "hidden_act": "silu",
        "rope_theta": m["rope_theta"], "rope_parameters": {"rope_type": "default", "rope_theta": m["rope_theta"]},
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": m["tie_embeddings"],
        "torch_dtype": "float32",
    }
    return out, config


def export_hf(checkpoint_dir, out_dir):
    """Checkpoint -> a Hugging Face model folder; returns the list of files written."""
    tensors, run_config = checkpoint_tensors(checkpoint_dir)
    m = model_in_use(run_config)
    _require(m["architecture"] in ("gpt2", "llama"),
             f"export --format hf: {checkpoint_dir} holds a model.architecture {m['architecture']} model; "
             "Hugging Face export covers the gpt2 and llama families")
    _require(m["attention.kind"] == "dense",
             "export --format hf: model.attention.kind block_sparse has no transformers equivalent")
    if m["architecture"] == "gpt2":
        _require(m["n_kv_head"] == m["n_head"], f"export --format hf: GPT-2 in transformers has no grouped-query "
                 f"attention (model.n_kv_head {m['n_kv_head']} != n_head {m['n_head']})")
        hf_tensors, hf_config = _gpt2_hf(tensors, m)
    else:
        _require(not m["bias"], "export --format hf: LLaMA with model.bias true has biases on q/k/v, the attention "
                 "output, the SwiGLU gate and the MLP output but none on the up matrix, which transformers' "
                 "LlamaForCausalLM cannot hold (its mlp_bias gives gate, up and down one each)")
        hf_tensors, hf_config = _llama_hf(tensors, m)
    tokenizer_dir = _gpt2_tokenizer_dir(run_config)
    if tokenizer_dir is not None:
        hf_config.update(bos_token_id=_eot_id(tokenizer_dir), eos_token_id=_eot_id(tokenizer_dir))
    os.makedirs(out_dir, exist_ok=True)
    written = [os.path.join(out_dir, "model.safetensors"), os.path.join(out_dir, "config.json")]
    _myriad.write_safetensors(written[0], {k: np.ascontiguousarray(v) for k, v in hf_tensors.items()},
                              {"format": "pt", "producer": "myriad"})
    with open(written[1], "w") as f:
        json.dump(hf_config, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": hf_config.get("bos_token_id"), "eos_token_id": hf_config.get("eos_token_id")}, f)
    written.append(os.path.join(out_dir, "generation_config.json"))
    if tokenizer_dir is not None:
        written += _write_gpt2_tokenizer(tokenizer_dir, out_dir, m["context_length"])
    return written


def _gpt2_tokenizer_dir(run_config):
    spec = run_config["data.tokenizer"]
    return spec[len("gpt2:"):] if spec.startswith("gpt2:") else None


def _tokenizer_files(folder):
    if os.path.exists(os.path.join(folder, "encoder.json")):
        return os.path.join(folder, "encoder.json"), os.path.join(folder, "vocab.bpe")
    return os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")


def _eot_id(folder):
    with open(_tokenizer_files(folder)[0]) as f:
        return json.load(f)["<|endoftext|>"]


def _write_gpt2_tokenizer(folder, out_dir, context_length):
    vocab, merges = _tokenizer_files(folder)
    shutil.copyfile(vocab, os.path.join(out_dir, "vocab.json"))
    shutil.copyfile(merges, os.path.join(out_dir, "merges.txt"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "model_max_length": context_length, "bos_token": "<|endoftext|>",
                   "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "add_prefix_space": False}, f, indent=2)
    return [os.path.join(out_dir, n) for n in ("vocab.json", "merges.txt", "tokenizer_config.json")]


# ---------------------------------------------------------------------------------------------
# import


def _file_inside(folder, name, listed_in):
    """folder/name when `name` is a plain file name whose real path (symlinks resolved) is inside
    `folder`; an index naming '../x', an absolute path or a link out is refused, never read."""
    plain = isinstance(name, str) and name not in ("", ".", "..") and os.path.basename(name) == name
    _require(plain, f"import --format hf: {listed_in} names the file {str(name)[:200]!r}, which is not a file name "
             f"inside {folder}: refusing to read it")
    path = os.path.join(folder, name)
    if os.path.exists(path):
        real, inside = os.path.realpath(path), os.path.realpath(folder)
        _require(os.path.dirname(real) == inside, f"import --format hf: {path} (listed in {listed_in}) resolves to "
                 f"{real}, outside {inside} (a symbolic link out of it): refusing to read it")
    return path


def _read_hf_tensors(hf_dir):
    single = os.path.join(hf_dir, "model.safetensors")
    index = os.path.join(hf_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        return _myriad.read_safetensors(single)[0]
    if os.path.exists(index):
        try:
            with open(index, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
            files = sorted(set(weight_map.values()))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise HfError(f"import --format hf: {index} is not a safetensors index (a JSON object with a "
                          f"'weight_map' of tensor -> file): {type(e).__name__}") from None
        tensors = {}
        for name in files:
            tensors.update(_myriad.read_safetensors(_file_inside(hf_dir, name, index))[0])
        return tensors
    _require(not os.path.exists(os.path.join(hf_dir, "pytorch_model.bin")),
             f"import --format hf: {hf_dir} holds pytorch_model.bin (a pickle); save it as safetensors first "
             "(model.save_pretrained(dir, safe_serialization=True))")
    raise HfError(f"import --format hf: {hf_dir} has neither model.safetensors nor model.safetensors.index.json")


class _Taker:
    """Takes tensors by name from a folder's set; whatever is left at the end is an error. `prefix`
    (GPT-2's "transformer.") may or may not lead the file's names; errors show them as in the file."""

    def __init__(self, tensors, hf_dir, prefix=""):
        self.left = {}
        self.file_name = {}
        for k, v in tensors.items():
            if k.endswith(_IGNORED_SUFFIXES):
                continue
            short = k[len(prefix):] if prefix and k.startswith(prefix) else k
            self.left[short], self.file_name[short] = v, k
        self.hf_dir = hf_dir
        self.prefix = prefix

    def has(self, name):
        return name in self.left

    def take(self, name, shape):
        _require(name in self.left,
                 f"import --format hf: {self.hf_dir} lacks tensor '{self.prefix}{name}' {list(shape)}")
        t = self.left.pop(name)
        _require(tuple(t.shape) == tuple(shape),
                 f"import --format hf: tensor '{self.file_name[name]}' in {self.hf_dir} has shape "
                 f"{list(t.shape)}, the model of config.json expects {list(shape)}")
        return t

    def finish(self):
        _require(not self.left, f"import --format hf: {self.hf_dir} holds tensors the model of config.json does not "
                 f"have: {sorted(self.file_name[k] for k in self.left)[:8]}{' ...' if len(self.left) > 8 else ''}")


class _HfConfig:
    """config.json's values as the importer reads them: a missing key, a value of the wrong type or a
    size that is not a positive integer is one HfError naming the file and the key."""
    INTS = {"n_embd", "vocab_size", "n_layer", "n_head", "n_positions", "n_inner", "hidden_size",
            "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
            "max_position_embeddings"}
    NUMBERS = {"layer_norm_epsilon", "rms_norm_eps", "rope_theta"}
    BOOLS = {"tie_word_embeddings", "scale_attn_by_inverse_layer_idx", "scale_attn_weights", "attention_bias",
             "mlp_bias"}
    STRINGS = {"activation_function", "hidden_act", "model_type"}
    MAPS = {"rope_parameters", "rope_scaling"}

    def __init__(self, path, values):
        self.path, self.values = path, values

    def _checked(self, key, value):
        if value is None and key not in self.STRINGS:
            return None  # transformers writes null for "not set" (n_inner, head_dim, rope_scaling, ...)
        if key in self.INTS:
            ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
            want = "a positive integer"
        elif key in self.NUMBERS:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
            want = "a positive number"
        elif key in self.BOOLS:
            ok, want = isinstance(value, bool), "true or false"
        elif key in self.STRINGS:
            ok, want = isinstance(value, str), "a string"
        elif key in self.MAPS:
            ok, want = isinstance(value, dict), "an object"
        else:
            ok, want = True, ""
        _require(ok, f"import --format hf: {self.path}: '{key}' must be {want}, got {json.dumps(value)[:80]}")
        return value

    def __getitem__(self, key):
        _require(key in self.values, f"import --format hf: {self.path} has no '{key}' (needed for model_type "
                 f"'{self.values.get('model_type')}')")
        return self._checked(key, self.values[key])

    def get(self, key, default=None):
        return self._checked(key, self.values[key]) if key in self.values else default


def _read_hf_config(config_path):
    """config.json as an _HfConfig; unreadable, not UTF-8, not JSON or not an object: one HfError."""
    try:
        with open(config_path, encoding="utf-8") as f:
            values = json.load(f)
    except UnicodeDecodeError as e:
        raise HfError(f"import --format hf: {config_path} is not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise HfError(f"import --format hf: {config_path} is not valid JSON: {e.msg} at line {e.lineno} column "
                      f"{e.colno}") from None
    except ValueError as e:  # json's other refusals, e.g. an integer of more than 4300 digits
        raise HfError(f"import --format hf: {config_path} is not valid JSON: {str(e).splitlines()[0][:120]}") from None
    except (OSError, RecursionError) as e:
        raise HfError(f"import --format hf: {config_path} cannot be read: {type(e).__name__}") from None
    _require(isinstance(values, dict), f"import --format hf: {config_path} must hold a JSON object, got "
             f"{type(values).__name__}")
    return _HfConfig(config_path, values)


def _gpt2_from_hf(cfg, tensors, hf_dir):
    act = cfg.get("activation_function", "gelu_new")
    _require(act in ("gelu_new", "gelu_pytorch_tanh"), f"import --format hf: activation_function '{act}'; myriad's "
             "GPT-2 uses the tanh GELU (gelu_new)")
    _require(not cfg.get("scale_attn_by_inverse_layer_idx", False) and cfg.get("scale_attn_weights", True),
             "import --format hf: GPT-2 attention scaling other than 1/sqrt(head_dim) is not supported")
    C, V, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_layer"]
    ffn = cfg.get("n_inner") or 4 * C
    tie = cfg.get("tie_word_embeddings", True)
    take = _Taker(tensors, hf_dir, prefix="transformer.")
    out = {"wte": take.take("wte.weight", (V, C)), "wpe": take.take("wpe.weight", (cfg["n_positions"], C))}
    for i in range(L):
        b, h = f"blocks.{i}.", f"h.{i}."
        for ours, theirs, shape, transpose in [
                ("norm1.weight", "ln_1.weight", (C,), False), ("norm1.bias", "ln_1.bias", (C,), False),
                ("attn.qkv.weight", "attn.c_attn.weight", (C, 3 * C), True),
                ("attn.qkv.bias", "attn.c_attn.bias", (3 * C,), False),
                ("attn.proj.weight", "attn.c_proj.weight", (C, C), True),
                ("attn.proj.bias", "attn.c_proj.bias", (C,), False),
                ("norm2.weight", "ln_2.weight", (C,), False), ("norm2.bias", "ln_2.bias", (C,), False),
                ("mlp.fc.weight", "mlp.c_fc.weight", (C, ffn), True), ("mlp.fc.bias", "mlp.c_fc.bias", (ffn,), False),
                ("mlp.proj.weight", "mlp.c_proj.weight", (ffn, C), True),
                ("mlp.proj.bias", "mlp.c_proj.bias", (C,), False)]:
            t = take.take(h + theirs, shape)
            out[b + ours] = t.T if transpose else t
    out["norm_f.weight"] = take.take("ln_f.weight", (C,))
    out["norm_f.bias"] = take.take("ln_f.bias", (C,))
    if not tie:
        out["lm_head.weight"] = take.take("lm_head.weight", (V, C))
    elif take.has("lm_head.weight"):  # a tied file may still carry the head: it must equal wte
        _require(np.array_equal(take.take("lm_head.weight", (V, C)), out["wte"]),
                 f"import --format hf: {hf_dir} says tie_word_embeddings but lm_head.weight differs from wte")
    take.finish()
    model = {"architecture": "gpt2", "vocab_size": V, "n_layer": L, "n_head": cfg["n_head"], "n_embd": C,
             "context_length": cfg["n_positions"], "ffn_hidden": ffn, "norm_eps": cfg.get("layer_norm_epsilon", 1e-5),
             "tie_embeddings": bool(tie), "bias": True}
    return out, model


def _llama_from_hf(cfg, tensors, hf_dir):
    _require(cfg.get("hidden_act", "silu") == "silu", f"import --format hf: hidden_act '{cfg.get('hidden_act')}'; "
             "myriad's LLaMA uses SiLU (SwiGLU)")
    rope = cfg.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", "default")
    _require(rope_type == "default" and not cfg.get("rope_scaling"),
             f"import --format hf: rope scaling ({cfg.get('rope_scaling') or rope_type}) is not supported")
    _require(not cfg.get("attention_bias") and not cfg.get("mlp_bias"),
             "import --format hf: attention_bias / mlp_bias are not supported for the LLaMA family")
    C, V, L, H = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads") or H
    D = cfg.get("head_dim") or C // H
    _require(D * H == C, f"import --format hf: head_dim {D} x {H} heads != hidden_size {C} (myriad needs "
             "n_embd = n_head * head_dim)")
    ffn = cfg["intermediate_size"]
    tie = cfg.get("tie_word_embeddings", False)
    take = _Taker(tensors, hf_dir)
    out = {"wte": take.take("model.embed_tokens.weight", (V, C))}
    for i in range(L):
        b, h = f"blocks.{i}.", f"model.layers.{i}."
        out[b + "norm1.weight"] = take.take(h + "input_layernorm.weight", (C,))
        if take.has(h + "self_attn.qkv_proj.weight"):
            out[b + "attn.qkv.weight"] = take.take(h + "self_attn.qkv_proj.weight", ((H + 2 * Hkv) * D, C))
        else:
            out[b + "attn.qkv.weight"] = np.concatenate([take.take(h + "self_attn.q_proj.weight", (H * D, C)),
                                                         take.take(h + "self_attn.k_proj.weight", (Hkv * D, C)),
                                                         take.take(h + "self_attn.v_proj.weight", (Hkv * D, C))])
        out[b + "attn.proj.weight"] = take.take(h + "self_attn.o_proj.weight", (C, H * D))
        out[b + "norm2.weight"] = take.take(h + "post_attention_layernorm.weight", (C,))
        if take.has(h + "mlp.gate_up_proj.weight"):
            gate_up = take.take(h + "mlp.gate_up_proj.weight", (2 * ffn, C))
            out[b + "mlp.gate.weight"], out[b + "mlp.up.weight"] = gate_up[:ffn], gate_up[ffn:]
        else:
            out[b + "mlp.gate.weight"] = take.take(h + "mlp.gate_proj.weight", (ffn, C))
            out[b + "mlp.up.weight"] = take.take(h + "mlp.up_proj.weight", (ffn, C))
        out[b + "mlp.down.weight"] = take.take(h + "mlp.down_proj.weight", (C, ffn))
    out["norm_f.weight"] = take.take("model.norm.weight", (C,))
    if not tie:
        out["lm_head.weight"] = take.take("lm_head.weight", (V, C))
    elif take.has("lm_head.weight"):
        _require(np.array_equal(take.take("lm_head.weight", (V, C)), out["wte"]),
                 f"import --format hf: {hf_dir} says tie_word_embeddings but lm_head.weight differs from the embedding")
    take.finish()
    model = {"architecture": "llama", "vocab_size": V, "n_layer": L, "n_head": H, "n_kv_head": Hkv, "n_embd": C,
             "context_length": cfg.get("max_position_embeddings", 2048), "ffn_hidden": ffn,
             "norm_eps": cfg.get("rms_norm_eps", 1e-6),
             "rope_theta": rope.get("rope_theta", cfg.get("rope_theta", 1e4)),
             "tie_embeddings": bool(tie), "bias": False}
    return out, model


def _yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def import_hf(hf_dir, checkpoint_root, config_out=None, data_path=None, tokenizer=None):
    """A Hugging Face folder -> (step-0 checkpoint path, run config path). The run config holds the
    model section, the model's tokenizer (myriad/hf_tokenizer.py: `tokenizer` as given, else the
    folder's GPT-2 files or its converted byte-level tokenizer.json into CHECKPOINT_ROOT/tokenizer;
    a folder with none, or another kind, is refused) and `data_path` as corpus."""
    config_path = os.path.join(hf_dir, "config.json")
    _require(os.path.exists(config_path), f"import --format hf: {hf_dir} has no config.json")
    cfg = _read_hf_config(config_path)
    kind = cfg.get("model_type")
    tensors = _read_hf_tensors(hf_dir)
    if kind == "gpt2":
        ours, model = _gpt2_from_hf(cfg, tensors, hf_dir)
    elif kind == "llama":
        ours, model = _llama_from_hf(cfg, tensors, hf_dir)
    else:
        raise HfError(f"import --format hf: {config_path} has model_type '{kind}'; supported: gpt2, llama")
    lines = ["model:"] + [f"  {k}: {_yaml_value(v)}" for k, v in model.items()]
    try:
        spec, note = choose_tokenizer(hf_dir, os.path.join(checkpoint_root, "tokenizer"), model["vocab_size"],
                                      tokenizer)
    except TokenizerError as e:
        raise HfError(str(e)) from None
    lines += ["data:", f"  tokenizer: \"{spec}\""] + ([f"  path: {data_path}"] if data_path else [])
    config_out = config_out or os.path.join(checkpoint_root, "imported.yaml")
    os.makedirs(os.path.dirname(os.path.abspath(config_out)), exist_ok=True)
    with open(config_out, "w") as f:
        f.write(f"# Imported from {os.path.abspath(hf_dir)} (python -m myriad.convert import --format hf)\n")
        f.write(f"# {note}\n")
        f.write("\n".join(lines) + "\n")
    # myriad's embedding rows (the C++ config's padded vocabulary), zeros after V
    padded = _myriad.Config.from_file(config_out).derived()["model.padded_vocab_size"]
    for name in ("wte", "lm_head.weight"):
        if name in ours and ours[name].shape[0] != padded:
            ours[name] = np.concatenate([ours[name], np.zeros((padded - ours[name].shape[0], ours[name].shape[1]),
                                                              np.float32)])
    with tempfile.TemporaryDirectory() as tmp:
        staged = os.path.join(tmp, "model.safetensors")
        _myriad.write_safetensors(staged, {k: np.ascontiguousarray(v) for k, v in ours.items()})
        checkpoint = _myriad.import_safetensors(staged, config_out, checkpoint_root)
    return checkpoint, config_out
