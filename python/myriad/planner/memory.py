"""Per-rank memory: the ZeRO paper's recipe and myriad's own, to the byte.

Two models (docs/planning.md, Memory):

* `zero_paper(psi, dp, stage, k=12)`: the ZeRO paper's mixed-precision Adam accounting — fp16
  weights 2Ψ, fp16 gradients 2Ψ, optimizer state KΨ (fp32 master weights, momentum, variance:
  K = 12), each divided by the dp degree from the stage that shards it. Its worked example (7.5 B
  parameters, 64-way dp) gives 120, 31.4, 16.6 and 1.9 GB at stages 0 to 3.
* `rank_memory(inp, grid_rank)`: what myriad itself allocates on one rank: its parameters as the
  engine itself registers them under the shard plan (`_myriad.parameter_layout`: the model built on
  the meta device for the rank's tp / ep / pp part, cached per part), then, following the engine's
  rules from the model's shape and the layout, ZeRO buckets and owned
  chunks (ZeroLayout's arithmetic), fp32 master weights, fp32 gradients (full and/or shard),
  AdamW moments of the owned elements, the fp32 copy the model reads under bf16/fp16 (a 16-bit
  shard at ZeRO 3), and the activation buffers GptModel::prepare makes for the micro-batch slots
  the rank's pipeline schedule keeps in flight. `myriad.dry_run` builds the same rank on the meta
  device; the two must agree exactly (tests/python/test_planner_memory.py).

No allocation; the rank grid and the parameter layout come from the engine through the bindings
(layout.read_config gives the PlanInput).
"""
from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass, field

from .layout import PlanInput

F32 = 4


# ---------------------------------------------------------------- the ZeRO paper's recipe


@dataclass(frozen=True)
class ZeroPaperMemory:
    weights: float  # bytes per GPU
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def zero_paper(psi: float, dp: int, stage: int, k: int = 12) -> ZeroPaperMemory:
    """Model states per GPU in the ZeRO paper's accounting (2Ψ + 2Ψ + KΨ, sharded by stage)."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"zero stage {stage} is not one of 0, 1, 2, 3")
    if dp < 1:
        raise ValueError(f"dp {dp} must be >= 1")
    return ZeroPaperMemory(weights=2 * psi / (dp if stage >= 3 else 1),
                           gradients=2 * psi / (dp if stage >= 2 else 1),
                           optimizer=k * psi / (dp if stage >= 1 else 1))


# ---------------------------------------------------------------- myriad's layout, rank by rank


@dataclass(frozen=True)
class GridCoord:
    """A rank's coordinates on the engine's rank grid (`_myriad.RankGrid`: tp fastest, then cp, dp, pp;
    ep = dp % ep)."""
    tp: int = 0
    cp: int = 0
    dp: int = 0
    pp: int = 0
    ep: int = 0


@functools.lru_cache(maxsize=256)
def _rank_grid(tp: int, cp: int, dp: int, pp: int, ep: int):
    from .. import _myriad
    return _myriad.RankGrid(tp=tp, cp=cp, dp=dp, pp=pp, ep=ep)


def _grid(layout):
    return _rank_grid(layout.tp, layout.cp, layout.dp, layout.pp, layout.ep)


def coords(layout, rank: int) -> GridCoord:
    if not 0 <= rank < layout.world:
        raise ValueError(f"rank {rank} is not a rank of a world of {layout.world}")
    c = _grid(layout).coords(rank)
    return GridCoord(tp=c["tp"], cp=c["cp"], dp=c["dp"], pp=c["pp"], ep=c["ep"])


def rank_of(layout, coord: GridCoord) -> int:
    return _grid(layout).rank_of(tp=coord.tp, cp=coord.cp, dp=coord.dp, pp=coord.pp)


@dataclass
class _Param:
    name: str
    numel: int
    offset: int


@dataclass
class ParameterLayout:
    """One rank's flat parameter buffer: parameters in registration order and units, as the engine
    lays them out under its shard plan (`_myriad.parameter_layout`)."""
    params: list = field(default_factory=list)
    units: list = field(default_factory=list)  # (name, begin, end, expert)
    chunks: list = field(default_factory=list)  # the layers of each pipeline chunk the rank runs
    total: int = 0
    # zero_shard's answers for this (read-only) layout, by its other arguments: a search sizes the same
    # shard for every recompute mode and micro-batch of a layout.
    zero_shards: dict = field(default_factory=dict, repr=False, compare=False)

    def real_elements(self) -> int:
        return sum(p.numel for p in self.params)


@functools.lru_cache(maxsize=4096)
def _engine_layout(config_yaml: str, parallel: tuple, tp_rank: int, ep_rank: int, stage: int) -> ParameterLayout:
    from .. import _myriad
    tp, pp, ep, virtual_stages, pp_layers = parallel
    config = _myriad.Config.from_string(config_yaml, "plan")
    for key, value in (("tp", tp), ("pp", pp), ("ep", ep), ("dp", ep), ("cp", 1), ("virtual_stages", virtual_stages)):
        config[f"parallel.{key}"] = value
    config["parallel.pp_layers"] = [str(x) for x in pp_layers]
    # Parameters depend on the tp, ep and pp coordinates only: the smallest grid that has them
    # (dp = ep, cp = 1) builds the same rank part as the run's.
    grid = _myriad.RankGrid(tp=tp, dp=ep, pp=pp, ep=ep)
    got = _myriad.parameter_layout(config, grid.world_size, grid.rank_of(tp=tp_rank, dp=ep_rank, pp=stage))
    return ParameterLayout(params=[_Param(name, numel, offset) for name, numel, offset, _, _ in got["parameters"]],
                           units=[tuple(u) for u in got["units"]], chunks=got["chunks"], total=got["total"])


def parameter_layout(inp: PlanInput, coord: GridCoord) -> ParameterLayout:
    """The rank's parameters as the engine registers them (GptModel under the shard plan, built on the
    meta device through the bindings), cached per (model, tp, ep, pp) part."""
    lay = inp.layout
    parallel = (lay.tp, lay.pp, lay.ep, lay.virtual_stages, tuple(lay.pp_layers))
    try:
        return _engine_layout(inp.config_yaml, parallel, coord.tp, coord.ep, coord.pp)
    except RuntimeError as e:  # myriad.Error: a layout the model cannot be cut by (names the parameter)
        raise ValueError(str(e).split("] ", 1)[-1]) from None


def _chunk(n: int, parts: int, index: int) -> tuple:
    return n * index // parts, n * (index + 1) // parts


@dataclass(frozen=True)
class ZeroShard:
    shard_elements: int  # this rank's chunks of every bucket
    optimizer_elements: int  # owned elements that belong to a parameter (padding excluded)
    buckets: int


def zero_shard(params: ParameterLayout, bucket_elements: int, parts: int, index: int, expert_parts: int,
               expert_index: int) -> ZeroShard:
    """ZeroLayout: buckets closed in backward order, one kind each; the rank's chunk of each."""
    key = (bucket_elements, parts, index, expert_parts, expert_index)
    if key not in params.zero_shards:
        params.zero_shards[key] = _zero_shard(params, *key)
    return params.zero_shards[key]


def _zero_shard(params: ParameterLayout, bucket_elements: int, parts: int, index: int, expert_parts: int,
                expert_index: int) -> ZeroShard:
    units = params.units
    buckets = []
    last = len(units) - 1
    for u in range(last, -1, -1):
        span = units[last][2] - units[u][1]
        kind_changes = u > 0 and units[u - 1][3] != units[u][3]
        if not (u == 0 or kind_changes or (bucket_elements > 0 and span >= bucket_elements)):
            continue
        begin, end, expert = units[u][1], units[last][2], units[u][3]
        lo, hi = _chunk(end - begin, expert_parts if expert else parts, expert_index if expert else index)
        buckets.append((begin + lo, begin + hi))
        last = u - 1
    shard = sum(hi - lo for lo, hi in buckets)
    offsets = [p.offset for p in params.params]  # increasing
    owned = 0
    for lo, hi in buckets:
        first = max(0, bisect.bisect_right(offsets, lo) - 1)
        for p in params.params[first:bisect.bisect_left(offsets, hi)]:
            owned += max(0, min(hi, p.offset + p.numel) - max(lo, p.offset))
    return ZeroShard(shard_elements=shard, optimizer_elements=owned, buckets=len(buckets))


@functools.lru_cache(maxsize=1024)
def _schedule_slots(schedule: str, pp: int, micro_batches: int, virtual_stages: int) -> tuple:
    """slots_in_flight of every stage of a schedule: a pure function of it, memoised (a layout search
    asks for the same few schedules thousands of times; the engine builds one — every stage's
    actions — in milliseconds, so it is built once and counted for all its stages)."""
    from .. import _myriad  # the engine's own schedule builder
    out = []
    for actions in _myriad.pipeline_schedule(schedule, pp, micro_batches, virtual_stages):
        seen, in_use, peak = set(), 0, 0
        for kind, micro_batch, chunk, _peer in actions:
            if micro_batch not in seen:
                seen.add(micro_batch)
                in_use += 1
                peak = max(peak, in_use)
            if kind == "backward" and chunk == 0:
                in_use -= 1
        out.append(peak)
    return tuple(out)


def _stage_slots(schedule: str, pp: int, micro_batches: int, virtual_stages: int, stage: int) -> int:
    return _schedule_slots(schedule, pp, micro_batches, virtual_stages)[stage]


@functools.lru_cache(maxsize=256)
def _moe_layers(model) -> tuple:
    """is_moe_layer of every layer of `model` (a frozen ModelShape), memoised."""
    return tuple(model.is_moe_layer(layer) for layer in range(model.n_layer))


def slots_in_flight(layout, stage: int) -> int:
    """Micro-batches the rank's schedule keeps in flight (PipelineExecutor::slots_in_flight)."""
    if layout.pp == 1:
        return 1  # forward then backward of each micro-batch
    return _stage_slots(layout.schedule, layout.pp, layout.gradient_accumulation, layout.virtual_stages, stage)


def activation_bytes(model, layout, coord: GridCoord, chunks: list, seq_len: int, slots: int,
                     precision: str = "fp32") -> int:
    """The buffers GptModel::prepare(B, T / cp, recompute, slots) allocates: f32 and i32 (4 bytes); under
    bf16 / fp16 the residual stream and the GEMM inputs the model keeps in the 16-bit format (block_activation_slots:
    h1, act, and h2 without MoE layers, and the head's input hf, f32 under sequence parallelism; the
    attention's output and rotated q, k where the attention takes 16-bit products), and the backward's
    gradients it keeps in that format (block_gradient_formats)."""
    tp, r = layout.tp, coord.tp
    B, T = layout.micro_batch, seq_len // layout.cp
    N, C, D = B * T, model.n_embd, model.head_dim
    sp = layout.sequence_parallel and tp > 1
    if sp and N % tp:
        raise ValueError(f"sequence parallel: the micro-batch's {N} tokens must divide evenly over tp {tp}")
    rows = N // tp if sp else N  # residual rows (x C)
    Hq, Hkv, F = model.n_head // tp, model.n_kv_head // tp, model.ffn_hidden // tp
    qkv = (Hq + 2 * Hkv) * D
    first, last = coord.pp == 0, coord.pp == layout.pp - 1
    layers = [layer for chunk in chunks for layer in chunk]
    mode = layout.recompute
    # Bytes per element of the kept GEMM inputs (in units of F32 = 4 bytes: 0.5 for 16-bit).
    gemm_input = 0.5 if precision in ("bf16", "fp16") and not sp else 1.0
    # The residual stream and its chunk gradients (the pipeline's messages) in the 16-bit format under
    # bf16 / fp16 (GptModel::activation_precision; the planner refuses fp8, whose stream is bf16).
    residual = 0.5 if precision in ("bf16", "fp16") else 1.0
    moe_pattern = _moe_layers(model)
    any_moe = any(moe_pattern)
    sixteen_attention = (precision in ("bf16", "fp16") and not model.block_sparse and layout.cp == 1
                         and model.head_dim in (64, 128))
    att_bytes = 0.5 if sixteen_attention else 1.0
    # (elements in f32 units, kept under none, kept under selective, dense MLP) of every block activation
    slots_of_block = [
        (rows, True, True, False), (rows, True, True, False),  # norm 1 mean, rstd
        (N * C * gemm_input, not sp, False, False),  # h1
        # qkv (16-bit with the attention's 16-bit products but for RoPE models, whose rotation reads it in f32);
        # att (16-bit where the attention takes 16-bit products: sixteen_bit_attention); lse
        (N * qkv * (att_bytes if model.learned_positions else 1.0), True, True, False),
        (N * Hq * D * att_bytes, True, True, False), (B * Hq * T, True, True, False),
        (rows * C, True, True, False),  # x_mid
        (rows, True, True, False), (rows, True, True, False),  # norm 2 mean, rstd
        (N * C * (1.0 if any_moe else gemm_input), not sp, False, False),  # h2 (the router reads it in f32)
        # fc (SwiGLU's gate or a GELU's pre-activation: kept in the format with act), act
        (N * F * gemm_input, True, True, True), (N * F * gemm_input, True, False, True),
    ]
    if not model.learned_positions:  # RoPE
        slots_of_block += [(N * Hq * D * att_bytes, True, True, False), (N * Hkv * D * att_bytes, True, True, False)]
    if model.swiglu:
        slots_of_block.append((N * F * gemm_input, True, True, True))  # up

    def kept(none: bool, selective: bool) -> bool:
        return none if mode == "none" else selective if mode == "selective" else False

    any_dense = any(not moe_pattern[layer] for layer in layers)
    # Once per model: block scratch, the recomputed activations' shared set, positions, head buffers.
    # d_h, d_tmp, y_wide, d_act, the norms' gradients; the kept gradients (block_gradient_formats):
    # d_att, d_qkv in the format where the attention takes 16-bit products, SwiGLU's d_fc, d_up in it
    # under bf16 / fp16, a GELU's d_fc with its pre-activation (not under sequence parallelism).
    mlp_grad = 0.5 if precision in ("bf16", "fp16") and (model.swiglu or not sp) else 1.0
    once = N * C + 2 * rows * C + N * F + 4 * C + (N * Hq * D + N * qkv) * att_bytes + N * F * mlp_grad
    if model.swiglu:
        once += N * F * mlp_grad  # d_up
    if sp:
        once += N * C + 2 * rows * C  # d_full, d_hs, h_rows
        if last:
            once += N * C  # hf_gathered
    once += sum(n for n, none, sel, dense in slots_of_block if not kept(none, sel) and (any_dense or not dense))
    once += N  # positions (i32)
    if residual < 1.0:
        once += rows * C  # grad_work: the f32 gradient of the stream while a chunk's backward runs
    if last:
        once += 2 * C + N + N * C  # final norm gradients, grad_losses, d_hf
    if model.learned_positions and first:
        once += rows * C  # pos_emb
    # Per micro-batch slot: the residual stream in and out of every block.
    per_slot = (len(layers) + len(chunks)) * rows * C * residual
    moe_layers = sum(1 for layer in layers if moe_pattern[layer])
    for moe, count in ((False, len(layers) - moe_layers), (True, moe_layers)):  # halves of 4 bytes: exact sums
        per_slot += count * sum(n for n, none, sel, dense in slots_of_block if kept(none, sel) and not (moe and dense))
    per_slot += len(chunks) * rows * C * residual  # chunk gradients (the pipeline's messages)
    if last:
        vocab_start = model.padded_vocab * r // tp
        logits = model.padded_vocab // tp if model.vocab_size - vocab_start > 0 else 0
        per_slot += rows * C * gemm_input + 2 * rows + N * logits + 2 * N  # hf, its mean / rstd, logits, losses, lse
    return round(F32 * (once + slots * per_slot))  # halves of 4 bytes: exact


@dataclass(frozen=True)
class RankMemory:
    """Bytes one rank holds (the fields of myriad.dry_run's report)."""
    rank: int
    coord: GridCoord
    parameter_elements: int
    shard_elements: int
    optimizer_elements: int
    master_weight_bytes: int
    compute_weight_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    activation_bytes: int
    activation_slots: int

    @property
    def total_bytes(self) -> int:
        return (self.master_weight_bytes + self.compute_weight_bytes + self.gradient_bytes + self.optimizer_bytes +
                self.activation_bytes)


def rank_memory(inp: PlanInput, rank: int) -> RankMemory:
    """What rank `rank` of the layout holds in myriad (equal to myriad.dry_run(config, world, rank))."""
    model, layout, batch = inp.model, inp.layout, inp.batch
    if layout.ep > 1 and layout.dp % layout.ep:
        raise ValueError(f"parallel.ep {layout.ep} must divide parallel.dp {layout.dp}")
    coord = coords(layout, rank)
    params = parameter_layout(inp, coord)
    stage = layout.zero_stage
    if layout.cp > 1:
        parts, index = layout.cp * layout.dp, coord.cp + layout.cp * coord.dp
    else:
        parts, index = layout.dp, coord.dp
    if layout.ep > 1:
        expert_parts, expert_index = layout.dp // layout.ep, coord.dp // layout.ep
    else:
        expert_parts, expert_index = parts, index
    if stage == 0:  # no sharding: one part, owned whole
        parts, index, expert_parts, expert_index = 1, 0, 1, 0
    bucket = 1 if stage >= 2 else int(layout.bucket_mb * 1048576.0 / 4.0)
    shard = zero_shard(params, bucket, parts, index, expert_parts, expert_index)
    psi = params.total
    master = F32 * (shard.shard_elements if stage == 3 else psi)
    grads = F32 * {0: psi, 1: psi + shard.shard_elements}.get(stage, shard.shard_elements)
    compute = 0
    if batch.precision != "fp32":
        # ZeRO-3: the 16-bit shard; else the rounded f32 copy the model reads and its 16-bit twin (the GEMMs')
        compute = 2 * shard.shard_elements if stage == 3 else (F32 + 2) * psi
    slots = slots_in_flight(layout, coord.pp)
    acts = activation_bytes(model, layout, coord, params.chunks, batch.seq_len, slots, batch.precision)
    return RankMemory(rank=rank, coord=coord, parameter_elements=psi, shard_elements=shard.shard_elements,
                      optimizer_elements=shard.optimizer_elements, master_weight_bytes=master,
                      compute_weight_bytes=compute, gradient_bytes=grads, optimizer_bytes=8 * shard.optimizer_elements,
                      activation_bytes=acts, activation_slots=slots)


def rank_roles(layout) -> list:
    """One rank per distinct role: every (pp stage, tp rank, ep rank) at dp 0 / cp 0, plus dp's last index.

    Ranks of one role hold the same shapes; ZeRO shards differ by at most a few elements between dp
    indices (the owned chunk of each bucket), so the first and last dp index bound them.
    """
    ranks = set()
    for pp in range(layout.pp):
        for tp in range(layout.tp):
            for ep in range(layout.ep):
                for dp in {ep, layout.dp - layout.ep + ep}:
                    for cp in {0, layout.cp - 1}:
                        ranks.add(rank_of(layout, GridCoord(tp=tp, cp=cp, dp=dp, pp=pp, ep=ep)))
    return sorted(ranks)


def peak_rank_memory(inp: PlanInput) -> RankMemory:
    """The most loaded role of the layout (the one that decides whether it fits)."""
    return max((rank_memory(inp, rank) for rank in rank_roles(inp.layout)), key=lambda m: m.total_bytes)
