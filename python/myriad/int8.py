"""Weight-only INT8 exports: every linear layer's weight as int8 with float scales.

export_int8(checkpoint_dir, out, group_size=0) writes one safetensors file: for each linear weight W
(attention qkv / proj, the MLP's weights, the LM head — the tied embedding included, since it is
the head) the tensor W as I8 and W.scales as F32 (per output channel, or per group of group_size
input columns; ops/int8_linear.h); every other parameter (norms, biases, positions) as F32; the
run config and `quantization: int8-weight-only` in the metadata. Engine.load_int8(file) serves it:
evaluate / forward / generate compute from the int8 weights (the CPU dequantises 128-row blocks
on the fly). evaluate_int8(...) measures the validation loss of both models on the run's data.
"""
import os
import tempfile

import numpy as np

from . import _myriad
from .config_values import model_in_use

LINEAR_SUFFIXES = ("attn.qkv.weight", "attn.proj.weight", "mlp.fc.weight", "mlp.proj.weight", "mlp.gate.weight",
                   "mlp.up.weight", "mlp.down.weight", "lm_head.weight")


def is_linear_weight(name, model):
    """Whether parameter `name` is a linear layer's weight (the tied embedding is the LM head)."""
    return name.endswith(LINEAR_SUFFIXES) or (name == "wte" and model["tie_embeddings"])


def export_int8(checkpoint_dir, out, group_size=0):
    """Checkpoint -> INT8 safetensors; returns a report: sizes (bytes) and what was quantised."""
    if group_size < 0:
        raise ValueError(f"export --format int8: group size {group_size} must be >= 0 (0 = per output channel)")
    with tempfile.TemporaryDirectory() as tmp:
        fp32_path = os.path.join(tmp, "fp32.safetensors")
        _myriad.export_safetensors(checkpoint_dir, fp32_path)
        fp32_bytes = os.path.getsize(fp32_path)
        tensors, metadata = _myriad.read_safetensors(fp32_path)
    config = _myriad.Config.from_string(metadata["config"], checkpoint_dir + "/manifest.json config")
    model = model_in_use(config)
    if model["architecture"] == "moe":
        raise ValueError("export --format int8: mixture-of-experts models are not supported")
    out_tensors, quantized, elements = {}, [], 0
    for name, value in tensors.items():
        elements += value.size
        if value.ndim == 2 and is_linear_weight(name, model):
            q, scales = _myriad.ops.quantize_int8(_myriad.from_numpy(np.ascontiguousarray(value)), group_size)
            out_tensors[name] = np.array(q.numpy(), copy=True)
            out_tensors[name + ".scales"] = np.array(scales.numpy(), copy=True)
            quantized.append(name)
        else:
            out_tensors[name] = value
    _myriad.write_safetensors(out, out_tensors, {
        "producer": "myriad", "quantization": "int8-weight-only", "group_size": str(group_size),
        "config": metadata["config"], "step": metadata.get("step", "")})
    header = fp32_bytes - 4 * elements  # the fp32 file's header: a bf16 file would carry the same
    return {"path": out, "int8_bytes": os.path.getsize(out), "fp32_bytes": fp32_bytes,
            "bf16_bytes": header + 2 * elements, "quantized": quantized, "group_size": group_size}


def evaluate_int8(checkpoint_dir, int8_path, work_dir):
    """Validation loss of the checkpoint and of its INT8 export on the run's validation split
    (training.eval_batches batches), each in a fresh engine whose folders are under work_dir."""
    _, metadata = _myriad.read_safetensors(int8_path)
    losses = {}
    for kind in ("fp32", "int8"):
        config = _myriad.Config.from_string(metadata["config"], int8_path + " config")
        config.set(f"logging.dir={os.path.join(work_dir, kind)}")
        config.set(f"checkpoint.dir={os.path.join(work_dir, kind, 'checkpoints')}")
        config.set("logging.level=warn")
        # This process alone: the source run's layout becomes one rank's (the global batch stays).
        for key in ("parallel.dp=0", "parallel.tp=1", "parallel.pp=1", "parallel.cp=1", "parallel.ep=1",
                    "training.gradient_accumulation=0"):
            config.set(key)
        engine = _myriad.Engine(config)
        if kind == "fp32":
            engine.load(checkpoint_dir)
        else:
            engine.load_int8(int8_path)
        losses[kind] = engine.evaluate()
        del engine
    losses["relative_change"] = (losses["int8"] - losses["fp32"]) / losses["fp32"]
    return losses
