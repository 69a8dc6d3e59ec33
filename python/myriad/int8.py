"""Weight-only INT8 exports: every linear weight and the token embedding as int8 with float scales.

export_int8(checkpoint_dir, out, group_size=0) writes one safetensors file: for each quantised
weight W the tensor W as I8 and W.scales as F32 (ops/int8_linear.h: per output channel, or per
group of group_size input columns), and every other parameter as F32; the run config and
`quantization: int8-weight-only` in the metadata. Quantised: the linear layers (attention qkv /
proj, the dense MLP's and the shared experts' weights, the untied LM head), the MoE experts' 3-D
weights (E, out, in) — per expert matrix per output channel, scales (E, out, groups) — and the
token embedding `wte` (tied or not) per row (the lookup dequantises the rows it reads). Left in
f32, each for a reason the report states: norms and biases (vectors), the learned positions `wpe`
(context_length rows, small next to wte) and the MoE router (E rows: small, and its top-k choice
is discrete, so the routing stays exactly the f32 model's). Engine.load_int8(file) serves it:
evaluate / forward / generate compute from the int8 weights, held as int8 in memory.
evaluate_int8(...) measures the validation loss of both models on the run's data.
"""
import os
import tempfile

import numpy as np

from . import _myriad
from .config_values import model_in_use

LINEAR_SUFFIXES = ("attn.qkv.weight", "attn.proj.weight", "mlp.fc.weight", "mlp.proj.weight", "mlp.gate.weight",
                   "mlp.up.weight", "mlp.down.weight", "lm_head.weight", "moe.shared.fc.weight",
                   "moe.shared.gate.weight", "moe.shared.up.weight", "moe.shared.proj.weight",
                   "moe.shared.down.weight")
EXPERT_SUFFIXES = ("moe.experts.fc.weight", "moe.experts.gate.weight", "moe.experts.up.weight",
                   "moe.experts.proj.weight", "moe.experts.down.weight")
# Parameters left in f32, by how their name ends, and why (the export report states it).
KEPT_F32 = (("moe.router.weight", "MoE router: small (E rows) and its top-k choice is discrete, so it stays "
             "the f32 model's"),
            ("wpe", "learned positions: context_length rows, small next to the vocabulary"),
            ("bias", "biases: vectors"), ("weight", "norms: vectors"))


def is_quantized(name, value):
    """Whether parameter `name` (array `value`) is stored as int8: linear weights (2-D), the MoE
    experts' weights (3-D, one matrix per expert) and the token embedding."""
    if value.ndim == 2 and (name.endswith(LINEAR_SUFFIXES) or name == "wte"):
        return True
    return value.ndim == 3 and name.endswith(EXPERT_SUFFIXES)


def why_f32(name, value):
    """The reason parameter `name` (array `value`) stays in f32 (KEPT_F32's first matching ending)."""
    if value.ndim == 1 or name == "wpe" or name.endswith("moe.router.weight"):
        return next(reason for ending, reason in KEPT_F32 if name.endswith(ending))
    return "no INT8 layer reads it"


def quantize(value, group_size):
    """(q int8, scales f32) of a 2-D weight, or of each matrix of a 3-D (E, out, in) one: per row of
    the (E * out, in) view, so every expert matrix gets its own per-output-channel scales."""
    rows = np.ascontiguousarray(value.reshape(-1, value.shape[-1]))
    q, scales = _myriad.ops.quantize_int8(_myriad.from_numpy(rows), group_size)
    q = np.array(q.numpy(), copy=True).reshape(value.shape)
    scales = np.array(scales.numpy(), copy=True)
    return q, scales.reshape(value.shape[:-1] + scales.shape[-1:])


def export_int8(checkpoint_dir, out, group_size=0):
    """Checkpoint -> INT8 safetensors; returns a report: sizes (bytes), what was quantised and what
    stayed f32 ({reason: [names]})."""
    if group_size < 0:
        raise ValueError(f"export --format int8: group size {group_size} must be >= 0 (0 = per output channel)")
    with tempfile.TemporaryDirectory() as tmp:
        fp32_path = os.path.join(tmp, "fp32.safetensors")
        _myriad.export_safetensors(checkpoint_dir, fp32_path)
        fp32_bytes = os.path.getsize(fp32_path)
        tensors, metadata = _myriad.read_safetensors(fp32_path)
    config = _myriad.Config.from_string(metadata["config"], checkpoint_dir + "/manifest.json config")
    model = model_in_use(config)
    out_tensors, quantized, kept, elements, kept_elements = {}, [], {}, 0, 0
    for name, value in tensors.items():
        elements += value.size
        if is_quantized(name, value):
            out_tensors[name], out_tensors[name + ".scales"] = quantize(value, group_size)
            quantized.append(name)
        else:
            out_tensors[name] = value
            kept.setdefault(why_f32(name, value), []).append(name)
            kept_elements += value.size
    _myriad.write_safetensors(out, out_tensors, {
        "producer": "myriad", "quantization": "int8-weight-only", "group_size": str(group_size),
        "config": metadata["config"], "step": metadata.get("step", "")})
    header = fp32_bytes - 4 * elements  # the fp32 file's header: a bf16 file would carry the same
    int8_bytes = os.path.getsize(out)
    bf16_bytes = header + 2 * elements
    return {"path": out, "int8_bytes": int8_bytes, "fp32_bytes": fp32_bytes, "bf16_bytes": bf16_bytes,
            "smaller_than_bf16": 1.0 - int8_bytes / bf16_bytes, "quantized": quantized, "kept_f32": kept,
            "kept_f32_elements": kept_elements, "elements": elements, "group_size": group_size,
            "architecture": model["architecture"]}


def describe_report(report):
    """The export's summary lines: sizes against fp32 and bf16, then what stayed f32 and why."""
    lines = [f"{report['path']}: {report['int8_bytes']} bytes ({len(report['quantized'])} weights in int8, group "
             f"size {report['group_size'] or 'per channel'}); fp32 {report['fp32_bytes']} bytes "
             f"({report['int8_bytes'] / report['fp32_bytes']:.1%}), bf16 {report['bf16_bytes']} bytes "
             f"({report['int8_bytes'] / report['bf16_bytes']:.1%}): {report['smaller_than_bf16']:.1%} smaller than "
             f"bf16",
             f"left in f32: {report['kept_f32_elements']} of {report['elements']} parameter elements "
             f"({report['kept_f32_elements'] / report['elements']:.1%})"]
    for reason, names in report["kept_f32"].items():
        shown = ", ".join(names[:4]) + (f", ... ({len(names)} tensors)" if len(names) > 4 else "")
        lines.append(f"  {reason}: {shown}")
    return "\n".join(lines)


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
