"""The step-time model against published, measured large-scale training runs.

`published_runs.json` (next to this file) lists runs whose papers or pages give the layout and a
measured throughput: the model's sizes, the cluster, tp/pp/dp/cp, micro- and global batch,
recompute, the engine (the published system's traits, step_time.ENGINES), the measured figure
exactly as published (TFLOP/s per GPU, MFU, tokens/s or seconds per step) with the FLOP convention
it was counted in, and the source with a quote. `validate()` turns each measured figure into seconds
per step with that convention, costs the same layout with `step_time` on the datasheet hardware
(hardware_from: no profile) and the row's engine traits, and reports predicted / measured - 1.

    python -m myriad.planner.validation                  # the table and its median |error|
    python -m myriad.planner.validation --gemm-profile machine_profile.json --gpu h200
        # the GEMM shape model against a profile's measured per-shape rates (compute.gemm_sizes,
        # written by bench_gemm_gpu --profile: cuBLAS on tensor-parallel shards and small widths)

FLOP conventions (per optimizer step, B sequences of s tokens, l layers, width h, vocabulary V):
- `megatron`: 24 c B s l h^2 (1 + s / (6 h) + V / (16 l h)), c = 4 with full recompute, else 3 —
  the count Megatron-LM and Megatron-DeepSpeed print (their throughput calculator); with c = 3 it is
  model FLOPs, with c = 4 hardware FLOPs;
- `6nd_attn`: 6 N + 12 l h s per token (N = the non-embedding weights + the embedding; attention
  over the full sequence), the MFU convention of PaLM and the Llama 3 report;
- `model`: this planner's own count (step_time.flops_per_token: causal attention T / 2).
Invariants: no number is fitted here; a row whose layout the engine rules refuse raises naming the
row; the data file is read, never written.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from dataclasses import dataclass

from .hardware import hardware_from
from .layout import Batch, Layout, ModelShape, PlanInput
from .step_time import ENGINES, EngineTraits, flops_per_token, step_time

DATA = os.path.join(os.path.dirname(__file__), "published_runs.json")


@dataclass(frozen=True)
class Row:
    name: str
    measured_s: float  # seconds per optimizer step, from the published figure and its convention
    predicted_s: float
    st: object  # StepTime
    run: dict

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


def load(path: str = DATA) -> list:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    runs = data["runs"]
    for run in runs:
        for key in ("name", "source", "quote", "gpu", "gpus", "model", "layout", "engine", "measured"):
            if key not in run:
                raise ValueError(f"{path}: run {run.get('name', '?')!r} lacks '{key}'")
        if run["engine"] not in ENGINES:
            raise ValueError(f"{path}: run {run['name']!r}: engine '{run['engine']}' is not one of "
                             f"{', '.join(ENGINES)}")
    return runs


BLOCK_PARTS = {"norm": ("layernorm", "rmsnorm"), "mlp": ("two_matrix", "swiglu"), "positions": ("learned", "rope")}


def model_shape(m: dict, tp: int) -> ModelShape:
    """ModelShape of a published model: GPT (LayerNorm, GELU, learned positions, biases) or LLaMA
    (RMSNorm, SwiGLU, RoPE, no biases), or a family with its block parts named (`norm`, `mlp`,
    `positions`, `bias`: e.g. Nemotron-4); the vocabulary padded as Megatron pads it (a multiple of
    128 x tp)."""
    family = m.get("family", "gpt2")
    for part, allowed in BLOCK_PARTS.items():
        if m.get(part, allowed[0]) not in allowed:
            raise ValueError(f"model.{part} '{m[part]}' is not one of {', '.join(allowed)}")
    h, heads = m["hidden"], m["heads"]
    kv = m.get("kv_heads", heads)
    ffn = m.get("ffn_hidden", 4 * h)
    multiple = 128 * tp
    padded = math.ceil(m["vocab"] / multiple) * multiple
    return ModelShape(family=family, vocab_size=m["vocab"], n_layer=m["layers"], n_head=heads, n_kv_head=kv,
                      n_embd=h, context_length=m["seq_len"], ffn_hidden=ffn,
                      tie_embeddings=m.get("tie_embeddings", family == "gpt2"), bias=m.get("bias", family == "gpt2"),
                      padded_vocab=padded, head_dim=h // heads, norm=m.get("norm", ""), mlp=m.get("mlp", ""),
                      positions=m.get("positions", ""))


def plan_input(run: dict) -> PlanInput:
    m, lay = run["model"], run["layout"]
    tp, pp, cp = lay.get("tp", 1), lay.get("pp", 1), lay.get("cp", 1)
    dp = run["gpus"] // (tp * pp * cp)
    if dp * tp * pp * cp != run["gpus"]:
        raise ValueError(f"run {run['name']!r}: tp {tp} x pp {pp} x cp {cp} does not divide {run['gpus']} GPUs")
    micro = lay["micro_batch"]
    accumulation = lay["global_batch"] // (micro * dp)
    if accumulation * micro * dp != lay["global_batch"]:
        raise ValueError(f"run {run['name']!r}: global batch {lay['global_batch']} is not micro-batch {micro} x "
                         f"dp {dp} x a whole number of micro-batches")
    v = lay.get("virtual_stages", 1)
    layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, virtual_stages=v,
                    schedule="interleaved" if v > 1 else "1f1b", zero_stage=lay.get("zero_stage", 1 if dp > 1 else 0),
                    sequence_parallel=lay.get("sequence_parallel", False), recompute=lay.get("recompute", "full"),
                    micro_batch=micro, gradient_accumulation=accumulation, bucket_mb=lay.get("bucket_mb", 8.0),
                    pp_layers=tuple(lay.get("pp_layers", ())))
    batch = Batch(seq_len=m["seq_len"], global_batch=lay["global_batch"], precision=run.get("precision", "bf16"),
                  device="cuda")
    return PlanInput(model=model_shape(m, tp), layout=layout, batch=batch, config_source=run["name"])


def convention_flops(run: dict, inp: PlanInput) -> float:
    """FLOPs per optimizer step in the convention the run's figure was counted in."""
    conv, m = run["measured"]["convention"], inp.model
    B, s, L, h = inp.batch.global_batch, inp.batch.seq_len, m.n_layer, m.n_embd
    if conv == "megatron":
        c = 4 if inp.layout.recompute == "full" else 3
        return 24.0 * c * B * s * L * h * h * (1 + s / (6.0 * h) + m.vocab_size / (16.0 * L * h))
    if conv == "6nd_attn":
        params = run["model"]["params"]
        return (6.0 * params + 12.0 * L * h * s) * B * s
    if conv == "model":
        return flops_per_token(m, s) * B * s
    raise ValueError(f"run {run['name']!r}: unknown FLOP convention '{conv}' (megatron, 6nd_attn, model)")


def measured_step_s(run: dict, inp: PlanInput) -> float:
    """Seconds per step from the published figure."""
    meas, gpus = run["measured"], run["gpus"]
    kind, value = meas["kind"], float(meas["value"])
    if kind == "step_s":
        return value
    if kind == "tokens_per_s":
        return inp.batch.global_batch * inp.batch.seq_len / value
    if kind == "tflops_per_gpu":
        return convention_flops(run, inp) / (gpus * value * 1e12)
    if kind == "mfu":
        peak = hardware_from(run["gpu"]).peak_flops(inp.batch.precision)
        return convention_flops(run, inp) / (gpus * value * peak)
    raise ValueError(f"run {run['name']!r}: unknown measured kind '{kind}' (step_s, tokens_per_s, tflops_per_gpu, mfu)")


def engine_traits(run: dict) -> EngineTraits:
    """The run's engine traits: the published system's (step_time.ENGINES), with the row's
    `engine_overrides` where its recipe sets a trait differently (e.g. TE's ring aggregation)."""
    overrides = run.get("engine_overrides", {})
    fields = {f.name for f in dataclasses.fields(EngineTraits)} - {"name"}
    for key in overrides:
        if key not in fields:
            raise ValueError(f"run {run['name']!r}: engine_overrides.{key} is not an EngineTraits field")
    return dataclasses.replace(ENGINES[run["engine"]], **overrides)


def engine_label(run: dict) -> str:
    overrides = run.get("engine_overrides", {})
    return run["engine"] + "".join(f", {k}={v}" for k, v in overrides.items())


def validate(runs=None) -> list:
    out = []
    for run in runs if runs is not None else load():
        inp = plan_input(run)
        hw = hardware_from(run["gpu"], run.get("gpus_per_node", 8), run.get("intra", ""), run.get("inter", "ib200"))
        try:
            st = step_time(inp, hw, engine_traits(run))
        except ValueError as e:
            raise ValueError(f"run {run['name']!r}: {e}") from None
        out.append(Row(name=run["name"], measured_s=measured_step_s(run, inp), predicted_s=st.total_s, st=st, run=run))
    return out


def median_abs_error(rows) -> float:
    return statistics.median(abs(r.error) for r in rows)


def table(rows) -> str:
    lines = ["| published run | GPUs | layout | engine traits | measured s/step | predicted s/step | error | "
             "predicted: compute / exposed comm / bubble |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        st, run = r.st, r.run
        exposed = ", ".join(f"{a} {s:.2f}" for a, s in st.exposed_comm_s.items() if s > 0.005) or "0"
        lines.append(f"| {r.name} | {run['gpus']} {run['gpu']} | {st.layout} | {engine_label(run)} | "
                     f"{r.measured_s:.3g} | {r.predicted_s:.3g} | {r.error:+.1%} | "
                     f"{st.compute_s:.3g} / {exposed} / {st.bubble_s:.3g} |")
    lines.append(f"\nmedian |error| {median_abs_error(rows):.1%} over {len(rows)} runs")
    return "\n".join(lines)


def gemm_rows(profile, gpu: str) -> list:
    """[(m, n, k, measured FLOP/s, model FLOP/s)] for a profile's compute.gemm_sizes on `gpu`'s GEMM
    model (hardware_from(gpu): the datasheet peak and HBM, no profile rates)."""
    from .gemm import gemm_seconds
    from .hardware import load_profile

    prof = load_profile(profile)
    hw = hardware_from(gpu)
    if hw.gemm_model is None:
        raise ValueError(f"gpu '{gpu}' has no GEMM shape model (a100, h100, h200)")
    sizes = prof["compute"].get("gemm_sizes", [])
    if not sizes:
        raise ValueError(f"machine profile {prof['path']}: no compute.gemm_sizes "
                         "(bench_gemm_gpu --profile writes them)")
    peak, hbm = hw.peak_flops("bf16"), hw.device.hbm_bytes_per_s
    out = []
    for entry in sizes:
        m, n, k = (int(entry[key]) for key in ("m", "n", "k"))
        model = 2.0 * m * n * k / gemm_seconds(hw.gemm_model, m, n, k, peak, hbm)
        out.append((m, n, k, float(entry["flops_per_s"]), model))
    return out


def gemm_table(rows) -> str:
    lines = ["| m | n | k | measured TFLOP/s | model TFLOP/s | model / measured - 1 |", "|---|---|---|---|---|---|"]
    lines += [f"| {m} | {n} | {k} | {meas / 1e12:.1f} | {model / 1e12:.1f} | {model / meas - 1:+.1%} |"
              for m, n, k, meas, model in rows]
    lines.append(f"\nmedian |error| {statistics.median(abs(model / meas - 1) for *_, meas, model in rows):.1%} "
                 f"over {len(rows)} shapes")
    return "\n".join(lines)


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(prog="python -m myriad.planner.validation",
                                     description="the step-time model against published measured runs")
    parser.add_argument("--data", default=DATA, help="published runs (JSON)")
    parser.add_argument("--gemm-profile", help="instead: the GEMM model against this profile's compute.gemm_sizes")
    parser.add_argument("--gpu", default="h100", help="the GEMM model to check (a100 | h100 | h200)")
    args = parser.parse_args(argv)
    if args.gemm_profile:
        print(gemm_table(gemm_rows(args.gemm_profile, args.gpu)))
        return 0
    print(table(validate(load(args.data))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
