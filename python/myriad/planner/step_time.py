"""Step-time model: how long one optimizer step of a layout takes on a `Hardware`, and what binds it.

`step_time(inp, hw)` takes a PlanInput (ModelShape, Layout, Batch; planner/layout.py) and returns a
`StepTime`: compute per micro-batch per chunk by op class, communication per axis (issued and
exposed), pipeline bubble, optimizer, the step, tokens/s, MFU and the binding constraint. The
formulas, assumptions and overlap rules are in docs/planning.md; in short:

- FLOPs mirror the engine (GptModel::flops_per_token, src/nn/gpt_model.cpp): 6 per active weight
  per token (attention, dense MLP or router + top_k + shared experts), the head V*C (tied: real
  vocabulary; untied: padded), attention 12*L*C per visible key (dense causal: T/2). Model FLOPs
  (for MFU) use that count; executed time adds what the rank really runs: padded logits, flash
  backward (2.5x its forward), recompute (full: one more forward of the blocks; selective: myriad
  re-runs only norms and the MLP activation, no GEMM -- TransformerBlock::recompute).
- Per rank: matmul FLOPs / tp (MoE layers: tokens / tp), layers of the rank's pipeline stages
  (ParallelConfig::stage_layers: pp_layers, else an even split), tokens / cp.
- Rates: on a GPU in a 16-bit run without a profile, each GEMM's time from its shape and attention
  by its kind (gemm.py: tile and wave quantisation, flash kernels, materialised scores); otherwise
  matmul FLOPs / hw.matmul rate (a tp split's own rate where the profile measured one), attention
  FLOPs / hw.attention rate (myriad runs attention on f32 CUDA-core flash kernels:
  EngineTraits.attention); memory-bound bytes / HBM rate; the
  MLP activation's bytes and the optimizer's bytes at their own measured rates where a profile has
  them (compute.activation_bytes_per_s, compute.optimizer_bytes_per_s), else the memory rate.
- Overlap: dp traffic (and tp traffic with EngineTraits.tp_overlap) hides behind compute only, never
  behind communication on the path, and the hidden seconds slow that compute by the GPU's overlap
  slowdown; an engine without dp_overlap reduces after the backward.
- Communication: alpha-beta rings per group and link class, the group's placement from the rank
  order (RankGrid: tp fastest, then cp, dp (ep inside dp), pp); myriad's exact pattern per axis;
  the intra-node link measured for the group's size while the layout's ranks share the node, where
  the profile has such links (Hardware.intra_link).
- Bubble: the idle share of the engine's own schedule run by its simulator (myriad.simulate_pipeline:
  equal to the closed forms (p-1)/(m+p-1) and (p-1)/(v*m+p-1) that pipeline_schedule.h documents).
- Time-shared cores (cpu_host whose ranks want more threads than the node has cores): every compute
  rate times Hardware.rank_share; the bubble is what remains of the critical path at full speed
  beyond the busy time (idle ranks yield their cores to ranks with work).

Invariants: total_s = compute_s + sum(exposed_comm_s) + bubble_s + optimizer_s exactly; every
input is checked with the engine's rules (a layout the engine refuses raises ValueError naming the
rule); no global state (EngineTraits are frozen values passed in; the schedule simulator's idle
share is memoised, a pure function of its arguments).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from .gemm import flash_seconds, gemm_seconds
from .hardware import Hardware, Link
from .layout import stage_layers

AXES = ("tp", "cp", "ep", "pp", "dp")
OP_CLASSES = ("matmul", "attention", "memory")


ATTENTION_KINDS = ("flash_fp32", "flash", "materialized")


@dataclass(frozen=True)
class EngineTraits:
    """Properties of the engine that change the time but not the model (defaults: myriad today)."""
    name: str = "myriad"
    activation_bytes: int = 4  # residual stream / activations / messages: f32 tensors holding rounded values
    # flash_fp32: fused kernels on CUDA cores in f32 (myriad: cuda_backend_model_ops.cpp); flash: fused
    # kernels on tensor cores (FlashAttention-2, cuDNN); materialized: scores in HBM (Megatron-LM's
    # batched GEMMs + fused scale-mask-softmax).
    attention: str = "flash_fp32"
    # myriad (2026-12-06): 16-bit runs take 16-bit attention products (cuDNN's fused attention: the `flash`
    # kind) for dense attention without cp at head dim 64 / 128 (TransformerBlock::attention_operands);
    # everything else stays `attention`.
    sixteen_bit_dense_attention: bool = True
    # myriad (2026-12-06): 16-bit runs keep the residual stream in the format, so the pipeline's messages
    # (activations and their gradients) take 2 bytes per element.
    sixteen_bit_residual_stream: bool = True
    gemm_operand_copies: bool = True  # 16-bit runs convert each GEMM's activation operands per call (a pass each)
    # ... except the inputs the blocks keep in the 16-bit format (myriad since 2026-12-06:
    # block_activation_slots): the norm outputs (qkv's, fc's / gate's and up's input; the MLP's h2 only
    # in a model without MoE layers) and the MLP activation (out's input), written 16-bit by the norm and
    # activation kernels; not under sequence parallelism (the gathers stay f32); and the attention
    # output (proj's input) where the attention takes 16-bit products.
    kept_gemm_inputs: bool = True
    # The weights' 16-bit copies are kept (written by the update: myriad at ZeRO 0-2) rather than
    # converted once per pass; at ZeRO 3 each gathered unit is converted per use either way.
    kept_weight_copies: bool = True
    attention_backward_factor: float = 2.5  # flash backward: 5 GEMM-like products vs the forward's 2
    dropout: bool = False  # attention-probability and hidden dropout (masks written forward, read backward)
    dp_overlap: bool = True  # gradient buckets reduced during the backward (False: all after it)
    tp_overlap: bool = False  # tp all-gathers / reduce-scatters overlapped with the block's GEMMs
    # tp collectives around the dense layers beside row blocks of their GEMMs (myriad since 2026-12-06:
    # TensorParallel::gather_rows_overlapped / reduce_to_rows_overlapped): with sequence parallelism
    # rings of t transfers, each beside one of the GEMM's t row blocks; without, the all-reduces in 2
    # blocks, the first in flight while the second is produced. MoE layers' collectives stay plain.
    tp_rings: bool = True
    # Transformer Engine's userbuffers (Megatron-Core --tp-comm-overlap, NeMo ub_tp_comm_overlap; needs
    # sequence parallelism), with its default split: the forward GEMMs on t row blocks beside ring
    # exchanges / pipelined reduce-scatters and the row-parallel layers' data gradients beside ring
    # exchanges (as tp_rings), while the column-parallel layers' data-gradient reduce-scatters and the
    # weight gradients' re-gathers run in bulk beside the other backward GEMM, which stays whole
    # (TE's ub_cfgs: qkv/fc1 fprop and proj/fc2 dgrad ring_exchange, proj/fc2 fprop pipeline, qkv/fc1
    # dgrad and wgrad bulk).
    tp_bulk_column_backward: bool = False
    # Pieces of the row-parallel layers' forward GEMMs (proj, out) beside their reduce-scatters: 0 = t
    # (myriad's rings); TE's pipelined reduce-scatter splits them in num_splits (4 by default).
    tp_row_forward_splits: int = 0
    # TE's ring exchange with aggregate=True (NeMo's Llama 3.1 405B config) runs each GEMM of the ring on
    # two arrived chunks at once: t / 2 pieces instead of t (1: every chunk its own GEMM).
    tp_ring_aggregate: int = 1
    # Bytes per weight per micro-batch moved to accumulate its gradient outside the GEMM (0: the weight-
    # gradient GEMM accumulates in place).
    grad_accumulation_bytes: float = 0.0
    # What recompute: selective re-runs: myriad's norms and MLP activation (no GEMM), or Megatron's
    # attention core (Korthikanti et al. 2022: Q K^T, softmax, dropout, attention over V).
    selective_recompute: str = "norms_activation"
    pp_scatter_gather: bool = False  # pp messages split over the tp ranks and all-gathered after (no SP)
    param_gather_bytes: int = 4  # bytes per element of ZeRO 1/2's all-gather of the updated values
    param_gather_overlap: bool = False  # that all-gather hidden behind the next step's first forward
    pp_overlap: bool = False  # pipeline sends / receives beside the next micro-batch's compute

    def __post_init__(self):
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"EngineTraits.attention '{self.attention}' is not one of {', '.join(ATTENTION_KINDS)}")
        if self.selective_recompute not in ("norms_activation", "attention_core"):
            raise ValueError(f"EngineTraits.selective_recompute '{self.selective_recompute}' is not norms_activation "
                             "or attention_core")


MYRIAD = EngineTraits()
# Published systems, for comparisons with their measured runs (docs/planning.md, "Validation"):
# Megatron-LM / Megatron-DeepSpeed of the A100 era (2021-2022): 16-bit activations and messages,
# attention scores materialised (batched GEMMs + fused scale-mask-softmax), dropout 0.1, gradient
# all-reduce after the backward (its local DDP), fused bias-GELU, weight gradients written in 16 bits
# by the GEMM and added into the fp32 main_grad buffer every micro-batch (write 2, read 2, read and
# write 4 + 4 = 12 bytes per weight; Megatron-Core fuses it into the GEMM: gradient_accumulation_fusion);
# a ZeRO-1 optimizer (DeepSpeed's BF16 optimizer, Megatron's distributed optimizer) gathers 16-bit values.
MEGATRON_LM = EngineTraits(name="megatron-lm", activation_bytes=2, attention="materialized", tp_rings=False,
                           sixteen_bit_dense_attention=False, gemm_operand_copies=False, dropout=True, dp_overlap=False,
                           grad_accumulation_bytes=12.0,
                           param_gather_bytes=2, selective_recompute="attention_core", pp_scatter_gather=True)
# Megatron-Core with Transformer Engine (2023-): flash attention (cuDNN / FlashAttention-2), gradient
# reduce-scatter overlapped with the backward (--overlap-grad-reduce), the distributed optimizer's
# 16-bit parameter all-gather beside the next forward (--overlap-param-gather), tp communication
# beside the GEMMs (--tp-comm-overlap), pipeline sends and receives beside compute, no dropout. The tp
# overlap is Transformer Engine's userbuffers with the split NeMo's H100 BF16 recipes configure
# (nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py: GPT-3 175B tp 4, Llama 3 70B tp 4,
# Llama 3.1 405B tp 8 — qkv / fc1 fprop and proj / fc2 dgrad ring_exchange, proj / fc2 fprop pipeline
# num_splits 4 (GPT-3's fc2 fprop a ring of 4), qkv / fc1 dgrad and wgrad bulk): its GEMMs run in those
# pieces, at the shape model's rate for the pieces.
MEGATRON_CORE = EngineTraits(name="megatron-core", activation_bytes=2, attention="flash", tp_rings=True,
                             tp_bulk_column_backward=True, tp_row_forward_splits=4,
                             gemm_operand_copies=False, dropout=False, dp_overlap=True, tp_overlap=True,
                             param_gather_bytes=2, param_gather_overlap=True, pp_overlap=True,
                             selective_recompute="attention_core", pp_scatter_gather=True)
# The Megatron-like traits under their earlier name (16-bit activations, tensor-core attention
# GEMMs, no operand copies).
SIXTEEN_BIT_ENGINE = MEGATRON_LM
ENGINES = {e.name: e for e in (MYRIAD, MEGATRON_LM, MEGATRON_CORE)}


@dataclass(frozen=True)
class StepTime:
    """One optimizer step of a layout on a machine. Seconds unless named otherwise."""
    layout: str
    micro_batches: int  # per step per pipeline (gradient accumulation)
    chunk_compute_s: tuple  # per chunk of the bottleneck rank, per micro-batch: {op class: seconds}
    microbatch_s: float  # one micro-batch on the bottleneck rank: compute + on-path communication
    compute_s: float  # per step on the bottleneck rank (all micro-batches, all chunks)
    compute_by_class_s: dict  # compute_s split by op class
    comm_s: dict  # per axis: seconds of communication issued per step (overlapped or not)
    exposed_comm_s: dict  # per axis: seconds on the critical path
    bubble_s: float
    optimizer_s: float
    total_s: float
    tokens_per_step: int
    tokens_per_s: float
    model_flops_per_step: float
    mfu: float
    binding: str  # compute | bubble | optimizer | comm:<axis>
    notes: tuple = field(default_factory=tuple)

    @property
    def exposed_comm_total_s(self) -> float:
        return sum(self.exposed_comm_s.values())


# ---- collectives (alpha-beta) ------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _idle_fraction(schedule: str, pp: int, micro_batches: int, virtual_stages: int) -> float:
    """The idle share of the engine's schedule run by its simulator: a pure function, memoised (a
    layout search asks for the same few schedules many times)."""
    from .. import _myriad
    return _myriad.simulate_pipeline(schedule, pp, micro_batches, virtual_stages)["idle_fraction"]

def ring_all_reduce_s(nbytes: float, n: int, alpha: float, beta: float) -> float:
    """Ring all-reduce of an nbytes buffer over n ranks: 2(n-1)/n * bytes * beta + 2(n-1) * alpha."""
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1) / n * nbytes * beta + 2.0 * (n - 1) * alpha


def ring_all_gather_s(nbytes: float, n: int, alpha: float, beta: float) -> float:
    """Ring all-gather (or reduce-scatter) whose full buffer is nbytes: (n-1)/n * bytes * beta + (n-1) * alpha."""
    if n <= 1:
        return 0.0
    return (n - 1) / n * nbytes * beta + (n - 1) * alpha


ring_reduce_scatter_s = ring_all_gather_s


def all_to_all_s(nbytes: float, n: int, alpha: float, beta: float) -> float:
    """Pairwise all-to-all of a rank's nbytes send buffer (1/n stays): (n-1)/n * bytes * beta + (n-1) * alpha."""
    if n <= 1:
        return 0.0
    return (n - 1) / n * nbytes * beta + (n - 1) * alpha


def p2p_s(nbytes: float, alpha: float, beta: float) -> float:
    """One point-to-point message: bytes * beta + alpha."""
    return nbytes * beta + alpha


def group_placement(size: int, stride: int, gpus_per_node: int) -> tuple:
    """(nodes, members per node) of a group of `size` ranks `stride` apart in rank order, nodes
    holding `gpus_per_node` consecutive ranks. A group that does not fall in whole nodes (its span
    does not divide the node) is counted as crossing nodes."""
    if size <= 1:
        return 1, 1
    span = size * stride
    if span <= gpus_per_node and gpus_per_node % span == 0:
        return 1, size
    per_node = max(1, min(size, gpus_per_node // stride)) if stride < gpus_per_node else 1
    return max(2, math.ceil(size / per_node)), per_node


class Network:
    """Times of myriad's collectives on the groups of one layout (RankGrid order: tp, cp, dp, pp;
    ep = `ep` consecutive dp replicas). The intra-node link of a group is the one measured for its
    size while the layout's ranks share the node (Hardware.intra_link)."""

    def __init__(self, hw: Hardware, tp: int, cp: int, dp: int, pp: int, ep: int):
        self.hw = hw
        self.ranks_on_node = min(tp * cp * dp * pp, hw.gpus_per_node)
        # axis -> (size, stride); dcp = the dp x cp gradient group; edp = ranks holding the same experts.
        self.groups = {"tp": (tp, 1), "cp": (cp, tp), "dp": (dp, tp * cp), "ep": (ep, tp * cp),
                       "edp": (dp // ep, tp * cp * ep), "dcp": (dp * cp, tp), "pp": (pp, tp * cp * dp)}

    def size(self, group: str) -> int:
        return self.groups[group][0]

    def _links(self, group: str) -> tuple:
        size, stride = self.groups[group]
        nodes, per_node = group_placement(size, stride, self.hw.gpus_per_node)
        if nodes > 1 and self.hw.inter is None:
            raise ValueError(f"the {group} group ({size} ranks, {stride} apart) spans {nodes} nodes of "
                             f"{self.hw.gpus_per_node}, but hardware '{self.hw.name}' has no inter-node link")
        return nodes, per_node, self.hw.intra_link(self.ranks_on_node, min(size, per_node)), self.hw.inter

    def _ring(self, group: str, nbytes: float, reduce_twice: bool) -> float:
        size = self.size(group)
        if size <= 1:
            return 0.0
        nodes, per_node, intra, inter = self._links(group)
        steps = 2 * (size - 1) if reduce_twice else size - 1
        inter_steps = (2 * (nodes - 1) if reduce_twice else nodes - 1) if nodes > 1 else 0
        factor = (2.0 if reduce_twice else 1.0) * (size - 1) / size
        beta = intra.beta_s_per_byte
        if nodes > 1:
            # NCCL runs one ring (channel) per NIC: each of the group's members on a node is the node's exit
            # for 1/per_node of the channels, so it sends factor * S / per_node over its own NIC and the
            # rest over the intra-node link, both at once (nccl-tests #119: 8 A100 per node with 4 HDR
            # NICs reach 96 GB/s bus bandwidth = 4 x 24 GB/s).
            beta = max(inter.beta_s_per_byte / per_node, intra.beta_s_per_byte * (1.0 - 1.0 / per_node))
        alpha = (steps - inter_steps) * intra.alpha_s + (inter_steps * inter.alpha_s if inter_steps else 0.0)
        # NCCL's split of a ring's steps into intra- and inter-node ones (tuning.cc); one link class:
        # exactly ring_all_reduce_s / ring_all_gather_s.
        return factor * nbytes * beta + alpha

    def all_reduce(self, group: str, nbytes: float) -> float:
        return self._ring(group, nbytes, True)

    def all_gather(self, group: str, nbytes: float) -> float:
        return self._ring(group, nbytes, False)

    reduce_scatter = all_gather

    def all_to_all(self, group: str, nbytes: float) -> float:
        """Pairwise exchange: the bytes for members on this node over the intra link, the rest over
        the node's link to the network (one NIC per GPU; NCCL's all-to-all cannot aggregate NICs)."""
        size = self.size(group)
        if size <= 1:
            return 0.0
        nodes, per_node, intra, inter = self._links(group)
        if nodes == 1:
            return all_to_all_s(nbytes, size, intra.alpha_s, intra.beta_s_per_byte)
        local = (per_node - 1) / size * nbytes * intra.beta_s_per_byte
        remote = (size - per_node) / size * nbytes * inter.beta_s_per_byte
        return max(local, remote) + (per_node - 1) * intra.alpha_s + (size - per_node) * inter.alpha_s

    def neighbour_link(self, group: str) -> Link:
        """The link a message to the group's next member crosses (the slowest of the ring's hops)."""
        nodes, _, intra, inter = self._links(group)
        return inter if nodes > 1 else intra

    def p2p(self, group: str, nbytes: float) -> float:
        if self.size(group) <= 1:
            return 0.0
        link = self.neighbour_link(group)
        return p2p_s(nbytes, link.alpha_s, link.beta_s_per_byte)


# ---- model arithmetic ---------------------------------------------------------------------------

def keys_per_query(seq_len: int) -> float:
    """Dense causal attention's mean visible keys per query, the engine's model-FLOPs convention (T/2)."""
    return seq_len / 2.0


def active_block_weights(model, layer: int) -> float:
    """Weight elements one token multiplies by in block `layer` (gpt_model.cpp's active_block_weights)."""
    C = float(model.n_embd)
    attention = C * model.qkv_width + C * C
    if not model.is_moe_layer(layer):
        return attention + model.mlp_matrices * C * model.ffn_hidden
    expert = model.mlp_matrices * C * model.expert_ffn
    return attention + model.num_experts * C + (model.top_k + model.shared_experts) * expert


def flops_per_token(model, seq_len: int, mean_keys: float | None = None) -> float:
    """Model FLOPs per token, forward + backward: GptModel::flops_per_token. `mean_keys`: visible keys
    per query (default: dense causal T/2; block-sparse layouts need the engine's count)."""
    weights = sum(active_block_weights(model, layer) for layer in range(model.n_layer))
    head = (model.vocab_size if model.tie_embeddings else model.padded_vocab) * float(model.n_embd)
    keys = keys_per_query(seq_len) if mean_keys is None else mean_keys
    return 6.0 * (weights + head) + 12.0 * model.n_layer * model.n_embd * keys


def moe_capacity(model, seq_len: int) -> int:
    """Tokens per expert per sequence (MoeSpec::capacity); -1: unlimited."""
    if model.expert_capacity > 0:
        return model.expert_capacity
    if model.dropless or model.capacity_factor <= 0:
        return -1
    return max(1, math.ceil(model.capacity_factor * seq_len * model.top_k / model.num_experts))


def _check(model, lay, batch):
    """The engine's layout rules that change what is timed (RunConfig::validate and friends)."""
    tp, cp, ep, dp, pp = lay.tp, lay.cp, lay.ep, lay.dp, lay.pp
    T, B = batch.seq_len, lay.micro_batch
    for name, value in (("tp", tp), ("pp", pp), ("dp", dp), ("cp", cp), ("ep", ep),
                        ("virtual_stages", lay.virtual_stages), ("micro_batch", B),
                        ("gradient_accumulation", lay.gradient_accumulation)):
        if value < 1:
            raise ValueError(f"parallel/training {name} = {value} must be >= 1")
    if model.n_head % tp or model.n_kv_head % tp or model.ffn_hidden % tp or model.padded_vocab % tp:
        raise ValueError(f"tp {tp} must divide n_head ({model.n_head}), n_kv_head ({model.n_kv_head}), "
                         f"ffn_hidden ({model.ffn_hidden}) and the padded vocabulary ({model.padded_vocab})")
    if dp % ep:
        raise ValueError(f"ep {ep} must divide dp {dp} (expert parallelism splits the data-parallel replicas)")
    if model.is_moe and model.num_experts % ep:
        raise ValueError(f"ep {ep} must divide num_experts {model.num_experts}")
    if ep > 1 and not model.is_moe:
        raise ValueError(f"ep {ep} needs a mixture-of-experts model")
    if lay.zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage {lay.zero_stage} must be 0, 1, 2 or 3")
    if lay.zero_stage >= 2 and pp > 1:
        raise ValueError(f"ZeRO-{lay.zero_stage} with pp {pp} is refused (it reduces gradients during the "
                         "backward, which a pipeline interleaves across micro-batches; use ZeRO-1)")
    if lay.schedule not in ("1f1b", "gpipe", "interleaved"):
        raise ValueError(f"unknown pp_schedule '{lay.schedule}'")
    if lay.virtual_stages > 1 and lay.schedule != "interleaved":
        raise ValueError(f"virtual_stages {lay.virtual_stages} needs pp_schedule interleaved")
    if lay.schedule == "interleaved" and pp > 1 and lay.gradient_accumulation % pp:
        raise ValueError(f"the interleaved schedule needs the micro-batches ({lay.gradient_accumulation}) "
                         f"divisible by pp ({pp})")
    if lay.recompute not in ("none", "selective", "full"):
        raise ValueError(f"unknown recompute mode '{lay.recompute}'")
    if cp > 1 and (T % (2 * cp)):
        raise ValueError(f"seq_len {T} must divide into 2 * cp = {2 * cp} chunks")
    if cp > 1 and model.is_moe:
        raise ValueError("the planner does not model MoE models under context parallelism yet (the trainer runs "
                         "them: the expert-data group then spans cp, which this model's group geometry lacks)")
    if lay.sequence_parallel and tp > 1 and (B * T // cp) % tp:
        raise ValueError(f"sequence parallelism needs the micro-batch's tokens ({B * T // cp}) divisible by tp {tp}")
    if model.is_moe and tp > 1 and B % tp:
        raise ValueError(f"an MoE model with tp {tp} needs training.micro_batch ({B}) to be a multiple of tp")
    expected = B * lay.gradient_accumulation * dp
    if batch.global_batch != expected:
        raise ValueError(f"global batch {batch.global_batch} != micro_batch {B} x gradient_accumulation "
                         f"{lay.gradient_accumulation} x dp {dp} = {expected}")
    stage_layers(model.n_layer, pp, lay.virtual_stages, lay.pp_layers)


@dataclass
class _Unit:
    """A parameter unit of the rank (embeddings, a block, a block's experts, final norm/head)."""
    name: str
    elements: float  # dense or expert parameter elements this rank holds
    expert: bool
    tp_partial: float = 0.0  # elements whose gradients are tp-partial (MoE layers; norms under sequence parallelism)
    # Compute seconds of the pass through it per micro-batch (its block's, for both units of a block):
    # what dp traffic overlaps (communication on the path does not hide other communication).
    fwd_s: float = 0.0
    bwd_s: float = 0.0


class _Cost:
    """Seconds by op class, issued communication and on-path communication, per axis."""

    def __init__(self):
        self.compute = dict.fromkeys(OP_CLASSES, 0.0)
        self.issued = dict.fromkeys(AXES, 0.0)
        self.exposed = dict.fromkeys(AXES, 0.0)

    @property
    def compute_seconds(self) -> float:
        """Compute alone: what communication issued beside it can hide behind."""
        return sum(self.compute.values())

    def comm(self, axis, seconds, exposed=None):
        self.issued[axis] += seconds
        self.exposed[axis] += seconds if exposed is None else exposed

    def add(self, other, times=1.0):
        for key in OP_CLASSES:
            self.compute[key] += other.compute[key] * times
        for key in AXES:
            self.issued[key] += other.issued[key] * times
            self.exposed[key] += other.exposed[key] * times

    @property
    def seconds(self) -> float:
        return sum(self.compute.values()) + sum(self.exposed.values())


class _Model:
    """Per-rank costs of one micro-batch for one layout (the pieces step_time assembles)."""

    def __init__(self, inp, hw: Hardware, engine: EngineTraits, mean_keys):
        self.m, self.lay, self.batch, self.hw, self.engine = inp.model, inp.layout, inp.batch, hw, engine
        lay = self.lay
        self.net = Network(hw, lay.tp, lay.cp, lay.dp, lay.pp, lay.ep)
        self.T, self.B = self.batch.seq_len, lay.micro_batch
        self.N = self.B * self.T // lay.cp  # the rank's tokens per micro-batch
        self.sp = lay.sequence_parallel and lay.tp > 1
        self.rows = self.N // lay.tp if self.sp else self.N  # residual-stream rows held between tp regions
        self.any_moe = any(self.m.is_moe_layer(layer) for layer in range(self.m.n_layer))  # h2 stays f32 (router)
        self._block_costs = {}  # is_moe_layer -> one block's costs and their rooms (_block_unit_costs)
        self.keys = keys_per_query(self.T) if mean_keys is None else mean_keys
        precision = self.batch.precision.lower()
        self.sixteen = precision in ("bf16", "fp16")
        self.matmul_rate = hw.matmul_flops_per_s(precision, lay.tp)
        dense = mean_keys is None and lay.cp == 1 and self.m.head_dim in (64, 128)
        self.attention_kind = "flash" if (engine.sixteen_bit_dense_attention and self.sixteen and dense) \
            else engine.attention
        attention_fmt = "fp32" if self.attention_kind == "flash_fp32" else precision
        self.attention_rate = hw.attention_flops_per_s(attention_fmt)
        # Shape-dependent kernel times (gemm.py) where the device has a GEMM model and no profile
        # measured the rate; 16-bit runs only (fp32 GEMMs keep the flat rate).
        self.shapes = hw.gemm_model if (self.sixteen and not hw.matmul.calibrated) else None
        self.peak = hw.peak_flops(precision)
        self.hbm = hw.device.hbm_bytes_per_s if hw.device is not None else 0.0
        self.launch = self.shapes.launch_s if self.shapes else 0.0
        self.memory_rate = hw.memory_bytes_per_s()
        # Time-shared cores (cpu_host with more threads than cores): each rank keeps this share of its rates.
        self.share = hw.rank_share(min(lay.tp * lay.pp * lay.cp * lay.dp, hw.gpus_per_node))
        self.matmul_rate *= self.share
        self.attention_rate *= self.share
        self.memory_rate *= self.share
        self.activation_rate = hw.activation_bytes_per_s() * self.share
        self.optimizer_rate = hw.optimizer_bytes_per_s() * self.share
        for name, rate in (("matmul", self.matmul_rate), ("attention", self.attention_rate),
                           ("memory", self.memory_rate)):
            if not rate > 0:
                raise ValueError(f"hardware '{hw.name}' has no {name} rate (> 0) for precision {precision}")
        self.a = engine.activation_bytes  # bytes per activation element in memory and on the wire
        self.copy = 6.0 if (self.sixteen and engine.gemm_operand_copies) else 0.0  # read f32 + write 16-bit
        # The weights' copies per pass: none where they are kept (written by the update, ZeRO 0-2).
        self.weight_copy = 0.0 if (engine.kept_weight_copies and lay.zero_stage < 3) else self.copy

    # -- compute helpers ---------------------------------------------------------------------
    def _gemm_s(self, m, n, k, batch=1.0):
        """One GEMM (or `batch` of them): from its shape on a modelled GPU, else FLOPs / the flat rate."""
        if self.shapes is None:
            return 2.0 * m * n * k * batch / self.matmul_rate
        return gemm_seconds(self.shapes, m, n, k, self.peak * self.share, self.hbm * self.share, batch)

    def _gemms(self, cost, shapes, backward=False, klass="matmul"):
        """Forward GEMMs [(m, n, k, batch)] or, backward, their data (m x k x n) and weight (k x n x m) gradients."""
        for m, n, k, b in shapes:
            cost.compute[klass] += (self._gemm_s(m, k, n, b) + self._gemm_s(k, n, m, b)) if backward \
                else self._gemm_s(m, n, k, b)

    def _launches(self, cost, kernels):
        """Memory-bound kernel launches (each costs the launch gap on a modelled GPU)."""
        cost.compute["memory"] += kernels * self.launch

    def _bytes(self, cost, nbytes):
        cost.compute["memory"] += nbytes / self.memory_rate

    def _activation(self, cost, nbytes):  # counted in the memory class, at the activation rate
        cost.compute["memory"] += nbytes / self.activation_rate

    def _attention(self, cost, flops):
        cost.compute["attention"] += flops / self.attention_rate

    def block_weights(self, layer):
        """(dense elements, expert elements, tp-replicated MoE dense elements) of block `layer` on this rank."""
        m, lay = self.m, self.lay
        C, tp = float(m.n_embd), lay.tp
        norms = 2 * C * (2 if m.layernorm else 1)
        dense = norms + m.qkv_width * C / tp + C * C / tp
        if m.bias:
            dense += m.qkv_width / tp + C  # qkv bias sharded, proj bias replicated
        if not m.is_moe_layer(layer):
            dense += m.mlp_matrices * C * m.ffn_hidden / tp
            if m.bias:
                dense += m.ffn_hidden / tp + C
            return dense, 0.0, 0.0
        replicated = m.num_experts * C + m.shared_experts * m.mlp_matrices * C * m.expert_ffn  # router, shared
        return dense + replicated, (m.num_experts / lay.ep) * m.mlp_matrices * C * m.expert_ffn, replicated

    def block_gemms(self, layer):
        """The forward GEMMs of block `layer` on this rank: [(m, n, k, batch)] (m = rows, k = reduced)."""
        m, lay = self.m, self.lay
        C, tp, N = m.n_embd, lay.tp, self.N
        out = [(N, m.qkv_width / tp, C, 1), (N, C, C / tp, 1)]  # qkv (column-parallel), proj (row-parallel)
        if not m.is_moe_layer(layer):
            return out + [(N, (m.mlp_matrices - 1) * m.ffn_hidden / tp, C, 1), (N, C, m.ffn_hidden / tp, 1)]
        tokens = N / tp if tp > 1 else N  # the rank's B / tp sequences (moe_sequences)
        rows = tokens * m.top_k * lay.ep / m.num_experts  # per local expert, routing assumed uniform
        out += [(tokens, m.num_experts, C, 1),  # router
                (rows, (m.mlp_matrices - 1) * m.expert_ffn, C, m.num_experts / lay.ep),
                (rows, C, m.expert_ffn, m.num_experts / lay.ep)]
        if m.shared_experts:
            out += [(tokens, (m.mlp_matrices - 1) * m.expert_ffn, C, m.shared_experts),
                    (tokens, C, m.expert_ffn, m.shared_experts)]
        return out

    def attention_pass(self):
        """(forward cost, backward cost) of one block's attention core (scores, softmax, values) for
        one micro-batch, as the engine's attention kind runs it."""
        m, lay, kind = self.m, self.lay, self.attention_kind
        fwd, bwd = _Cost(), _Cost()
        heads, D = m.n_head / lay.tp, m.head_dim
        queries, keys_seen = self.T / lay.cp, self.T
        flops = 4.0 * self.N * (m.n_embd / lay.tp) * self.keys  # scores and values: 2 * 2 * C per visible key
        if kind == "materialized":  # batched GEMMs over the full T x T scores, then passes over them in HBM
            batch = self.B * heads
            self._gemms(fwd, [(queries, keys_seen, D, batch), (queries, D, keys_seen, batch)], klass="attention")
            # backward: dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q
            for shape in ((keys_seen, D, queries), (queries, keys_seen, D), (queries, D, keys_seen),
                          (keys_seen, D, queries)):
                bwd.compute["attention"] += self._gemm_s(*shape, batch)
            scores = batch * queries * keys_seen
            mask = 5.0 if self.engine.dropout else 0.0  # dropout: read + write 16-bit, write a 1-byte mask
            # forward: scale-mask-softmax reads and writes the scores; backward: the softmax gradient
            # reads y and dy and writes dx; dropout's backward reads the mask and the gradient, writes it.
            fwd.compute["attention"] += scores * (4.0 + mask) / self.memory_rate + (2 if mask else 1) * self.launch
            bwd.compute["attention"] += scores * (6.0 + mask) / self.memory_rate + (2 if mask else 1) * self.launch
        elif kind == "flash" and self.shapes is not None and not self.hw.attention.calibrated:
            args = (self.B, heads, queries, D, self.keys, self.peak * self.share)
            fwd.compute["attention"] += flash_seconds(self.shapes, *args)
            bwd.compute["attention"] += flash_seconds(self.shapes, *args, backward=True)
        else:
            fwd.compute["attention"] += flops / self.attention_rate
            bwd.compute["attention"] += self.engine.attention_backward_factor * flops / self.attention_rate
        return fwd, bwd

    def layer_pass(self, layer):
        """(forward cost, backward cost incl. recompute) of block `layer` for one micro-batch (read-only:
        shared by every block of its kind, see _block_unit_costs)."""
        return self._block_unit_costs(layer)[:2]

    def _cost_layer_pass(self, layer):
        m, lay, a = self.m, self.lay, self.a
        C, tp, N, rows = float(m.n_embd), lay.tp, self.N, self.rows
        fwd, bwd = _Cost(), _Cost()
        gemms = self.block_gemms(layer)
        moe = m.is_moe_layer(layer)
        # Seconds of each GEMM forward, its data gradient and its weight gradient; those beside myriad's
        # tp collectives (tp_blocked_gemms) on t blocks of N / t rows.
        fwd_blocked, dgrad_blocked = self.tp_blocked_gemms(moe)
        nb = self.tp_blocks()
        te = self.sp and self.engine.tp_bulk_column_backward  # Transformer Engine's userbuffer split
        ring = max(1, nb // self.engine.tp_ring_aggregate) if te else nb  # GEMMs per ring exchange
        row_splits = self.engine.tp_row_forward_splits if self.sp and self.engine.tp_row_forward_splits else ring

        def pieces(i):  # row blocks of forward GEMM i
            return row_splits if i in (1, 3) else ring

        fwd_s = [(pieces(i) * self._gemm_s(mm / pieces(i), n, k, b) if i in fwd_blocked else self._gemm_s(mm, n, k, b))
                 for i, (mm, n, k, b) in enumerate(gemms)]
        dgrad_s = [(ring * self._gemm_s(mm / ring, k, n, b) if i in dgrad_blocked else self._gemm_s(mm, k, n, b))
                   for i, (mm, n, k, b) in enumerate(gemms)]
        # With sequence parallelism the weight gradients of qkv and fc run beside the re-gathers of their
        # inputs (unless full recompute re-ran the forward): on t blocks of N / t reduced rows.
        regathered = (fwd_blocked & {0, 2} if (self.sp and lay.recompute != "full"
                                               and not self.engine.tp_bulk_column_backward) else set())
        wgrad_s = [(tp * self._gemm_s(k, n, mm / tp, b) if i in regathered else self._gemm_s(k, n, mm, b))
                   for i, (mm, n, k, b) in enumerate(gemms)]

        def beside(seconds, i, blocked):  # the GEMM a collective runs beside, or None (plain)
            return seconds[i] if i in blocked else None

        fwd.compute["matmul"] += sum(fwd_s)
        att_f, att_b = self.attention_pass()
        fwd.add(att_f)
        tokens = N / tp if (moe and tp > 1) else N
        # Memory-bound forward bytes (elementwise ops read and write activations of `a` bytes; the kept
        # GEMM inputs are written in 2 and not converted again).
        kept = self.sixteen and self.engine.kept_gemm_inputs and not self.sp
        h1_bytes, act_out = (2.0, 2.0) if kept else (a, a)
        h2_bytes = 2.0 if (kept and not self.any_moe) else a
        h1_copy = 0.0 if kept else self.copy
        h2_copy = 0.0 if (kept and not self.any_moe) else self.copy
        norm_bytes = (2 * C * a + C * h1_bytes + C * h2_bytes) * rows  # two norms: read C, write C per row
        act_bytes = 0.0
        mem = norm_bytes + 2 * 3 * C * a * rows  # + two residual adds: read 2C, write C
        kernels = 5  # two norms, two residual adds, the MLP activation
        if self.engine.dropout:  # hidden dropout before each residual add: a 1-byte mask written
            mem += 2 * C * rows
        if moe:
            k_rows = tokens * m.top_k
            act_bytes = (2 if not m.swiglu else 3) * m.expert_ffn * a * (k_rows + tokens * m.shared_experts)
            mem += 8 * C * a * k_rows  # gather, regroup, ungroup, combine: read + write k*C
            kernels += 4
            # GEMM inputs converted: the experts' (gate and up, or fc) and down inputs, the router's.
            mem += self.copy * (k_rows * (C * (m.mlp_matrices - 1) + m.expert_ffn) + tokens * C)
        else:
            act_bytes = ((1 if not m.swiglu else 2) * a + act_out) * (m.ffn_hidden / tp) * N
            mem += N * (h2_copy * C * (m.mlp_matrices - 1) + (0.0 if kept else self.copy) * m.ffn_hidden / tp)
        kept_attention = self.sixteen and self.engine.kept_gemm_inputs and self.attention_kind == "flash"
        if not m.learned_positions:  # RoPE: read and write q and k (written 16-bit where kept for the attention)
            mem += (a + (2.0 if kept_attention else a)) * (m.n_head + m.n_kv_head) * m.head_dim / tp * N
            kernels += 1
        # The attention output (proj's input) is kept 16-bit where the attention takes 16-bit products.
        att_copy = 0.0 if kept_attention else self.copy
        mem += N * (h1_copy * C + att_copy * C / tp)  # qkv and proj inputs
        dense_w, expert_w, _ = self.block_weights(layer)
        mem += self.weight_copy * (dense_w + expert_w)  # the weights' 16-bit copies, once per pass
        self._bytes(fwd, mem)
        self._activation(fwd, act_bytes)  # the MLP activation (GELU / SwiGLU): its own rate where measured
        self._launches(fwd, kernels)
        # Communication on the forward's path.
        # The GEMMs beside the collectives: what the gathers feed (qkv, fc) and the reductions take (proj,
        # out).
        fwd_rings = ([beside(fwd_s, 0, fwd_blocked), beside(fwd_s, 2, fwd_blocked)],
                     [beside(fwd_s, 1, fwd_blocked), beside(fwd_s, 3, fwd_blocked)])
        fwd_comm = self._overlap_tp(
            self.block_comm_forward(moe, tokens if moe else N, att_f.compute_seconds, fwd_rings), fwd.compute["matmul"])
        fwd_comm_cost = _Cost()
        for axis, issued, exposed in fwd_comm:
            fwd_comm_cost.comm(axis, issued, exposed)
        fwd.add(fwd_comm_cost)
        # Backward: each GEMM's data and weight gradients, the attention core's backward, memory 2x.
        bwd.compute["matmul"] += sum(dgrad_s) + sum(wgrad_s)
        bwd.add(att_b)
        self._bytes(bwd, 2.0 * mem)
        self._activation(bwd, 2.0 * act_bytes)
        self._launches(bwd, 2 * kernels)
        # Weight gradients accumulated outside the GEMM (a pass per parameter per micro-batch).
        self._bytes(bwd, self.engine.grad_accumulation_bytes * (dense_w + expert_w))
        # Backward: the output gradients gathered for out's and proj's data gradients, the data gradients
        # of qkv and fc reduced, the norm outputs re-gathered for qkv's and fc's weight gradients.
        bwd_rings = ([beside(dgrad_s, 3, dgrad_blocked), beside(dgrad_s, 1, dgrad_blocked)],
                     [beside(dgrad_s, 0, dgrad_blocked), beside(dgrad_s, 2, dgrad_blocked)],
                     [beside(wgrad_s, 0, regathered), beside(wgrad_s, 2, regathered)])
        bwd_comm = self.block_comm_backward(moe, tokens if moe else N, att_b.compute_seconds, bwd_rings)
        for axis, issued, exposed in self._overlap_tp(bwd_comm, bwd.compute["matmul"]):
            bwd.comm(axis, issued, exposed)
        # Recompute inside backward.
        if lay.recompute == "full":
            bwd.compute["matmul"] += sum(fwd_s)
            bwd.add(att_f)
            self._bytes(bwd, mem)
            self._activation(bwd, act_bytes)
            self._launches(bwd, kernels)
            bwd.add(fwd_comm_cost)
        elif self.engine.selective_recompute == "attention_core":
            if lay.recompute == "selective":  # Megatron's: the attention core (scores, softmax, values) again
                bwd.add(att_f)
        elif lay.recompute == "selective" or self.sp:  # norms again (and the MLP activation when selective)
            self._bytes(bwd, norm_bytes)
            self._activation(bwd, act_bytes if lay.recompute == "selective" and not moe else 0.0)
        return fwd, bwd

    def _slowed(self, comm_s, exposed_s):
        """Exposed seconds of `comm_s` of communication of which `exposed_s` is not hidden, plus what the
        hidden part costs the compute beside it: while a collective overlaps compute its kernels hold SMs
        (NCCL: one per channel) and compute slows by gemm.GemmModel.overlap_slowdown (0 without a GPU model)."""
        slowdown = self.shapes.overlap_slowdown if self.shapes is not None else 0.0
        return exposed_s + slowdown * max(0.0, comm_s - exposed_s)

    def _overlapped(self, comm_s, compute_s):
        """Exposed seconds of a transfer run beside `compute_s` of compute: what exceeds it, plus the
        overlap slowdown of the hidden part."""
        return self._slowed(comm_s, max(0.0, comm_s - compute_s))

    def _overlap_tp(self, comm, gemm_s):
        """With tensor-parallel communication overlapped with the block's GEMMs (EngineTraits.tp_overlap:
        chunked all-gather / reduce-scatter beside the GEMMs that consume or produce them), the block's
        tp seconds beyond its GEMM seconds stay exposed, and the hidden part slows the GEMMs by the
        overlap slowdown; each tp entry keeps its share."""
        if not (self.engine.tp_overlap and self.lay.tp > 1):
            return comm
        total = sum(s for axis, s, _ in comm if axis == "tp")
        if total <= 0:
            return comm
        exposed = self._overlapped(total, gemm_s)
        return [(axis, s, s * exposed / total if axis == "tp" else e) for axis, s, e in comm]

    def _tp_full_bytes(self):
        return self.N * self.m.n_embd * self.a  # one (B, T/cp, C) activation

    def tp_blocked_gemms(self, moe):
        """(forward, data-gradient) indices into block_gemms of the GEMMs myriad runs on t row blocks
        beside its tp collectives (EngineTraits.tp_rings): with sequence parallelism every dense GEMM both
        ways (the rings feed or take them); without, the row-parallel layers' forwards (proj, out) and the
        column-parallel layers' data gradients (qkv, fc), beside their blocks' all-reduces (tp_blocks). A MoE layer's
        MLP GEMMs stay whole. Under EngineTraits.tp_bulk_column_backward (Transformer Engine's userbuffers)
        the column-parallel layers' data gradients stay whole, and nothing is split without sequence
        parallelism."""
        if not (self.engine.tp_rings and self.lay.tp > 1):
            return set(), set()
        dense = {0, 1} if moe else {0, 1, 2, 3}
        if self.sp:
            return dense, (dense & {1, 3} if self.engine.tp_bulk_column_backward else dense)
        if self.engine.tp_bulk_column_backward:  # TE's userbuffers need sequence parallelism: plain GEMMs
            return set(), set()
        return dense & {1, 3}, dense & {0, 2}

    def tp_blocks(self):
        """Row blocks of the GEMMs beside the tp collectives: t in sequence parallelism's rings, 2 beside
        the all-reduces without it (TensorParallelRegions::reduce_to_rows_overlapped)."""
        return self.lay.tp if self.sp else 2

    def _tp_block_all_reduce(self, S, gemm_s):
        """('tp', issued, exposed) of an all-reduce of S bytes in 2 row blocks, the first in flight while
        the GEMM produces the second (gemm_s: both blocks' seconds), the second exposed whole."""
        nb = self.tp_blocks()
        block = self.net.all_reduce("tp", S / nb)
        issued = nb * block
        return ("tp", issued, self._slowed(issued, (nb - 1) * max(0.0, block - gemm_s / nb) + block))

    def _tp_all_reduces(self, S, gemms):
        """A pass's two all-reduces without sequence parallelism: in blocks beside the GEMM where `gemms`
        names it, else plain."""
        return [self._tp_block_all_reduce(S, g) if g is not None else ("tp", self.net.all_reduce("tp", S), None)
                for g in gemms]

    def _tp_ring(self, S, gemm_s):
        """('tp', issued, exposed) of one sequence-parallel ring over an (N, C) activation of S bytes:
        t - 1 transfers of S / t, each beside one of the t row blocks of the GEMM that reads or produces
        the rows (gemm_s: the t blocks' seconds); a transfer longer than its block shows the excess."""
        t = self.lay.tp
        step = self.net.p2p("tp", S / t)
        issued = (t - 1) * step
        return ("tp", issued, self._slowed(issued, (t - 1) * max(0.0, step - gemm_s / t)))

    def _tp_sp_collectives(self, S, rings):
        """A pass's two gathers and two reduce-scatters under sequence parallelism: rings where
        `rings` ([gather GEMM s, ...], [reduce-scatter GEMM s, ...], backward: [re-gather GEMM s, ...])
        names the GEMM, else plain."""
        gathers, scatters = rings[:2] if rings is not None else ([None, None], [None, None])
        out = [self._tp_ring(S, g) if g is not None else ("tp", self.net.all_gather("tp", S), None) for g in gathers]
        return out + [self._tp_ring(S, g) if g is not None else ("tp", self.net.reduce_scatter("tp", S), None)
                      for g in scatters]

    def block_comm_forward(self, moe, moe_tokens, att_s, rings=None):
        """[(axis, issued s, exposed s)] of one block's forward (`rings`: the GEMMs beside the gathers and
        the reductions, as _tp_sp_collectives takes them)."""
        out, lay = [], self.lay
        if lay.tp > 1:
            S = self._tp_full_bytes()
            if self.sp:  # all-gather before each column-parallel input, reduce-scatter after each row-parallel output
                out += self._tp_sp_collectives(S, rings)
            else:  # all-reduce after each row-parallel output
                out += self._tp_all_reduces(S, rings[1] if rings is not None else [None, None])
        if moe and lay.ep > 1:
            out += self._moe_exchange(moe_tokens)
        if lay.cp > 1:
            out += self._ring_attention(att_s, backward=False)
        return [(axis, s, s if e is None else e) for axis, s, e in out]

    def block_comm_backward(self, moe, moe_tokens, att_s, rings=None):
        out, lay, net = [], self.lay, self.net
        if lay.tp > 1:
            S = self._tp_full_bytes()
            if self.sp:
                # gathered output gradients, reduce-scattered input gradients, and (unless full recompute
                # re-ran the forward) the norm outputs gathered again. (The norm weights' partial gradients
                # are summed over tp once per step: _dp_tail.)
                out += self._tp_sp_collectives(S, rings)
                if lay.recompute != "full":  # rings beside qkv's and fc's weight gradients where given
                    regathers = rings[2] if rings is not None else [None, None]
                    out += [self._tp_ring(S, g) if g is not None else ("tp", net.all_gather("tp", S), None)
                            for g in regathers]
            else:  # the column-parallel inputs' gradients
                out += self._tp_all_reduces(S, rings[1] if rings is not None else [None, None])
        if moe and lay.ep > 1:
            out += self._moe_exchange(moe_tokens)
        if lay.cp > 1:
            out += self._ring_attention(att_s, backward=True)
        return [(axis, s, s if e is None else e) for axis, s, e in out]

    def _moe_exchange(self, tokens):
        """Dispatch and combine all-to-alls of one MoE layer's pass (plus the counts' all-to-all)."""
        m = self.m
        seqs = tokens / self.T
        cap = moe_capacity(m, self.T)
        per_seq = m.top_k * self.T if cap < 0 else min(m.top_k * self.T, m.num_experts * cap)
        rows_bytes = seqs * per_seq * m.n_embd * self.a
        counts = self.net.all_to_all("ep", m.num_experts * 8)
        move = self.net.all_to_all("ep", rows_bytes)
        return [("ep", counts, None), ("ep", move, None), ("ep", move, None)]

    def _ring_attention(self, att_s, backward):
        """K/V round the cp ring; each transfer overlaps one ring step's attention, att_s / cp of the
        pass's attention seconds (ring_attention.cpp)."""
        m, lay, cp = self.m, self.lay, self.lay.cp
        kv_bytes = 2.0 * self.N * (m.n_kv_head // lay.tp) * m.head_dim * self.a  # packed K and V, both chunks
        t = self.net.p2p("cp", kv_bytes)
        step = att_s / cp
        if not backward:
            return [("cp", (cp - 1) * t, (cp - 1) * max(0.0, t - step))]
        # K/V go round again while the K/V gradients travel a second ring one step behind; the last
        # gradient transfer is waited for after the last step.
        exposed = (cp - 1) * max(0.0, 2 * t - step) + t
        return [("cp", (2 * cp - 1) * t, exposed)]

    def embedding_pass(self):
        """Forward and backward cost of the first stage's embedding lookup."""
        m, lay, net = self.m, self.lay, self.net
        fwd, bwd = _Cost(), _Cost()
        C = m.n_embd
        self._bytes(fwd, (2 + (2 if m.learned_positions else 0)) * C * self.a * self.N)
        self._bytes(bwd, 2 * C * self.a * self.N + (2 * C * self.a * self.N if m.learned_positions else 0))
        if lay.tp > 1:  # vocab-parallel lookup: zeros outside the shard, then summed over tp
            S = self._tp_full_bytes()
            fwd.comm("tp", net.reduce_scatter("tp", S) if self.sp else net.all_reduce("tp", S))
        return fwd, bwd

    def head_pass(self):
        """Forward and backward of the last stage's final norm, LM head (padded vocabulary / tp) and loss."""
        m, lay, net = self.m, self.lay, self.net
        fwd, bwd = _Cost(), _Cost()
        C, V = float(m.n_embd), m.padded_vocab / lay.tp
        self._gemms(fwd, [(self.N, V, C, 1)])
        self._gemms(bwd, [(self.N, V, C, 1)], backward=True)
        self._launches(fwd, 3)  # final norm, loss
        self._launches(bwd, 3)
        norm = 2 * C * self.a * self.rows
        logits = 4.0 * V * self.N  # f32 logits
        self._bytes(fwd, norm + 2 * logits + self.copy * self.N * C + self.weight_copy * V * C)
        self._bytes(bwd, 2 * norm + 2 * logits + self.copy * (self.N * V + self.N * C) + self.weight_copy * V * C)
        if lay.tp > 1:
            S = self._tp_full_bytes()
            if self.sp:
                fwd.comm("tp", net.all_gather("tp", S))
                bwd.comm("tp", net.reduce_scatter("tp", S))
            # vocab-parallel loss: max of the shards' log-sum-exp, then a sum of [exp | target logit]
            fwd.comm("tp", net.all_reduce("tp", 4 * self.N) + net.all_reduce("tp", 8 * self.N))
        return fwd, bwd

    def _room(self, cost):
        """Seconds of a pass that dp traffic can hide behind: its compute, less the time other hidden
        transfers hold the same link (concurrent transfers share its bandwidth)."""
        room = cost.compute_seconds
        if self.net.size("dcp") <= 1:
            return room
        dp_link = self.net.neighbour_link("dcp")
        for axis, group in (("cp", "cp"), ("pp", "pp"), ("tp", "tp")):
            hidden = cost.issued[axis] - cost.exposed[axis]
            if hidden > 0 and self.net.size(group) > 1 and self.net.neighbour_link(group) is dp_link:
                room -= hidden
        return max(0.0, room)

    def _block_unit_costs(self, layer):
        """(forward cost, backward cost, the room each leaves dp traffic) of block `layer`. A block's
        costs depend on the layer only through its kind (dense or MoE): each kind is costed once per
        layout and the same (read-only) costs returned for every block of it."""
        moe = self.m.is_moe_layer(layer)
        cached = self._block_costs.get(moe)
        if cached is None:
            f, b = self._cost_layer_pass(layer)
            cached = self._block_costs[moe] = (f, b, self._room(f), self._room(b))
        return cached

    def units(self, chunk_layers, first, last):
        """The rank's parameter units of one chunk with their forward/backward times per micro-batch,
        in flat (forward) order, and the chunk's (forward, backward) cost."""
        m, lay = self.m, self.lay
        C = float(m.n_embd)
        units, fwd, bwd = [], _Cost(), _Cost()
        if first:
            f, b = self.embedding_pass()
            elements = m.padded_vocab * C / lay.tp + (m.context_length * C if m.learned_positions else 0.0)
            units.append(_Unit("embeddings", elements, False, 0.0, self._room(f), self._room(b)))
            fwd.add(f)
            bwd.add(b)
        # Sequence parallelism: each tp rank normalises its own rows, so the norms' gradients are partial
        # and summed over tp once per step with the MoE layers' (the shard plan's tp_token_share).
        norm_elements = C * (2 if m.layernorm else 1)
        sp_partial = self.sp and lay.tp > 1
        for layer in chunk_layers:
            f, b, room_f, room_b = self._block_unit_costs(layer)
            dense, expert, replicated = self.block_weights(layer)
            if sp_partial:
                replicated += 2 * norm_elements
            units.append(_Unit(f"blocks.{layer}", dense, False, replicated, room_f, room_b))
            if expert > 0:  # timed with its block (its gradients are final when the block's are)
                units.append(_Unit(f"blocks.{layer}.experts", expert, True, expert, 0.0, 0.0))
            fwd.add(f)
            bwd.add(b)
        if last:
            f, b = self.head_pass()
            elements = C * (2 if m.layernorm else 1)
            if not m.tie_embeddings or not first:  # untied head, or the last stage's copy of the tied embedding
                elements += m.padded_vocab * C / lay.tp
            units.append(_Unit("head", elements, False, norm_elements if sp_partial else 0.0, self._room(f),
                               self._room(b)))
            fwd.add(f)
            bwd.add(b)
        if lay.pp > 1:  # activations in, gradients out (and back): on the path of every micro-batch
            element_bytes = 2 if self.sixteen and self.engine.sixteen_bit_residual_stream else self.a
            nbytes = self.rows * C * element_bytes
            gather = 0.0
            if self.engine.pp_scatter_gather and lay.tp > 1 and not self.sp:
                # Megatron: each tp rank sends its 1/tp slice, the receiver all-gathers it over NVLink.
                nbytes /= lay.tp
                gather = self.net.all_gather("tp", self.rows * C * element_bytes)
            p2p = self.net.p2p("pp", nbytes) + gather
            fwd.comm("pp", p2p, self._overlapped(p2p, fwd.compute_seconds) if self.engine.pp_overlap else None)
            bwd.comm("pp", p2p, self._overlapped(p2p, bwd.compute_seconds) if self.engine.pp_overlap else None)
        return units, fwd, bwd


def _fifo_finish(ready, durations):
    """A channel that runs items one at a time in order: item i may start at ready[i]."""
    t = 0.0
    for r, d in zip(ready, durations):
        t = max(t, r) + d
    return t


def _buckets(units, bucket_elements):
    """ZeroLayout's buckets (whole units, formed in backward order, closed at >= bucket_elements or where
    dense and expert units meet): list of (first unit, last unit, elements, expert)."""
    out, last = [], len(units) - 1
    for u in range(last, -1, -1):
        span = sum(x.elements for x in units[u:last + 1])
        kind_changes = u > 0 and units[u - 1].expert != units[u].expert
        if u == 0 or kind_changes or (bucket_elements > 0 and span >= bucket_elements):
            out.append((u, last, span, units[u].expert))
            last = u - 1
    return out


def _backward_ready(units, start=0.0):
    """When each unit's gradients are final in one backward over `units` (last unit first)."""
    ready, t = [0.0] * len(units), start
    for u in range(len(units) - 1, -1, -1):
        t += units[u].bwd_s
        ready[u] = t
    for u in range(len(units) - 1, 0, -1):  # an experts unit is final with its block (same time)
        if units[u].expert:
            ready[u] = ready[u - 1]
    return ready, t


def _dp_tail(model: _Model, units):
    """(issued dp seconds per step, exposed dp seconds after the schedule, exposed dp seconds per
    micro-batch, exposed seconds of the ZeRO all-gather of values after the update, optimizer seconds,
    exposed pp seconds of the tied-embedding exchange, exposed tp seconds of MoE partial gradients) for
    one pipeline rank."""
    lay, net, m = model.lay, model.net, model.m
    stage, mbs = lay.zero_stage, lay.gradient_accumulation
    f32 = 4.0
    gather_bytes = model.engine.param_gather_bytes  # ZeRO 1/2: the updated values all-gathered after the step

    def group(expert):
        return "edp" if expert and m.is_moe else "dcp"

    dense = sum(u.elements for u in units if not u.expert)
    expert = sum(u.elements for u in units if u.expert)
    held = dense + expert
    n_dense, n_expert = net.size("dcp"), net.size("edp")
    owned = held if stage == 0 else dense / n_dense + expert / n_expert
    issued = exposed_tail = per_mb = gather_after = tied = moe_tp = 0.0
    tie_exchange = m.tie_embeddings and lay.pp > 1 and any(u.name in ("embeddings", "head") for u in units)
    if tie_exchange:
        tied = net.p2p("pp", m.padded_vocab * m.n_embd / lay.tp * f32)
    if stage <= 1:
        bucket_elements = lay.bucket_mb * 1048576.0 / 4.0
        buckets = _buckets(units, bucket_elements)
        ready, end = _backward_ready(units)
        times, starts = [], []
        for first, last, elements, is_expert in buckets:
            op = net.all_reduce if stage == 0 else net.reduce_scatter
            times.append(op(group(is_expert), elements * f32))
            deferred = tie_exchange and any(u.name in ("embeddings", "head") for u in units[first:last + 1])
            after = deferred or lay.bucket_mb == 0 or not model.engine.dp_overlap
            starts.append(end + tied if after else ready[first])
        order = sorted(range(len(times)), key=lambda i: starts[i])
        finish = _fifo_finish([starts[i] for i in order], [times[i] for i in order])
        issued = sum(times)
        exposed_tail = max(0.0, finish - end - tied)
        exposed_tail = model._slowed(issued, exposed_tail)  # compute slowed while buckets overlap it
        if stage == 1:
            gather_after = sum(net.all_gather(group(is_expert), elements * gather_bytes)
                               for _, _, elements, is_expert in buckets)
            issued += gather_after
    elif stage == 2:  # one unit per bucket, reduce-scattered in every micro-batch's backward
        ready, end = _backward_ready(units)
        times = [net.reduce_scatter(group(u.expert), u.elements * f32) for u in units]
        order = sorted(range(len(units)), key=lambda i: ready[i])
        finish = _fifo_finish([ready[i] for i in order], [times[i] for i in order])
        per_mb = max(0.0, finish - end)
        per_mb = model._slowed(sum(times), per_mb)
        gather_after = sum(net.all_gather(group(u.expert), u.elements * gather_bytes) for u in units)
        issued = mbs * sum(times) + gather_after
    else:  # ZeRO-3: every unit gathered in forward and again in backward (next unit prefetched), reduce-scattered
        gather_bytes = 2.0 if model.sixteen else f32
        gathers = [net.all_gather(group(u.expert), u.elements * gather_bytes) for u in units]
        scatters = [net.reduce_scatter(group(u.expert), u.elements * f32) for u in units]
        per_mb = _zero3_exposed(units, gathers, scatters)
        per_mb = model._slowed(2 * sum(gathers) + sum(scatters), per_mb)
        issued = mbs * (2 * sum(gathers) + sum(scatters))
    partial_dense = sum(u.tp_partial for u in units if not u.expert)
    partial_expert = sum(u.tp_partial for u in units if u.expert)
    if lay.tp > 1 and partial_dense + partial_expert > 0:
        # tp-partial gradients (MoE layers; the norms under sequence parallelism): each rank's share
        # summed over tp once a step
        if stage >= 1:
            partial_dense, partial_expert = partial_dense / n_dense, partial_expert / n_expert
        moe_tp = net.all_reduce("tp", (partial_dense + partial_expert) * f32)
    # Optimizer: AdamW over the owned elements (read p, g, m, v; write p, m, v) + the gradient norm's read;
    # zeroing held gradients; the 16-bit compute copy refreshed (read f32, write 16-bit).
    opt_bytes = owned * (28.0 + 4.0) + (held if stage <= 1 else owned) * 4.0
    if model.sixteen:
        opt_bytes += (owned if stage == 3 else held) * 6.0
    optimizer = opt_bytes / model.optimizer_rate
    if model.engine.param_gather_overlap:  # gathered beside the next step's first forward, unit by unit
        gather_after = model._overlapped(gather_after, sum(u.fwd_s for u in units))
    return issued, exposed_tail, per_mb, gather_after, optimizer, tied, moe_tp


def _zero3_exposed(units, gathers, scatters):
    """Seconds one micro-batch waits on ZeRO-3 traffic. One channel runs, in issue order: in forward
    each unit's gather (the next unit's is issued when a unit starts computing; the first is not
    prefetched); in backward the gathers again (in reverse) and each unit's reduce-scatter when its
    backward ends; the backward ends when the last reduce-scatter has."""
    n = len(units)
    comm, compute, done = gathers[0], 0.0, [0.0] * n
    done[0] = comm
    for u in range(n):
        start = max(compute, done[u])
        if u + 1 < n:
            comm = max(comm, start) + gathers[u + 1]
            done[u + 1] = comm
        compute = start + units[u].fwd_s
    fwd_exposed = compute - sum(x.fwd_s for x in units)
    comm, t, done = gathers[n - 1], 0.0, [0.0] * n
    done[n - 1] = comm
    for u in range(n - 1, -1, -1):
        start = max(t, done[u])
        if u > 0:
            comm = max(comm, start) + gathers[u - 1]
            done[u - 1] = comm
        t = start + units[u].bwd_s
        comm = max(comm, t) + scatters[u]
    bwd_exposed = max(t, comm) - sum(x.bwd_s for x in units)
    return fwd_exposed + bwd_exposed


def step_time(inp, hw: Hardware, engine: EngineTraits = MYRIAD, mean_keys: float | None = None) -> StepTime:
    """Time one optimizer step of `inp` (a PlanInput: .model, .layout, .batch) on `hw`.

    `engine`: the engine's traits (default: myriad today). `mean_keys`: visible keys per query when
    attention is not dense causal (block-sparse: the engine's AttentionSpec::mean_keys_per_query)."""
    model, lay, batch = inp.model, inp.layout, inp.batch
    _check(model, lay, batch)
    mdl = _Model(inp, hw, engine, mean_keys)
    p, v, mbs = lay.pp, lay.virtual_stages, lay.gradient_accumulation
    layers = stage_layers(model.n_layer, p, v, lay.pp_layers)
    bounds = [sum(layers[:g]) for g in range(len(layers) + 1)]
    ranks = []
    for r in range(p):
        units, chunks, per_mb = [], [], _Cost()
        for c in range(v):  # rank r holds global stages r, r + p, ... (chunk c = stage c * p + r)
            g = c * p + r
            u, f, b = mdl.units(range(bounds[g], bounds[g + 1]), g == 0, g == p * v - 1)
            units += u
            chunk = _Cost()
            chunk.add(f)
            chunk.add(b)
            chunks.append(chunk)
            per_mb.add(chunk)
        ranks.append((r, units, chunks, per_mb))
    # The bottleneck pipeline rank sets the pace of every micro-batch (and of the bubble).
    _, _, chunks, per_mb = max(ranks, key=lambda x: x[3].seconds)
    t_mb = per_mb.seconds
    bubble = 0.0
    if p > 1:
        # The engine's schedule run by its simulator (equal stages, free transfers): idle share of the
        # makespan; each rank is busy m * t_mb, so the bubble is idle / (1 - idle) of that. For its time
        # model this is (p-1) t_mb / v exactly (pipeline_schedule.h's closed forms).
        idle = _idle_fraction(lay.schedule, p, mbs, v)
        bubble = idle / (1.0 - idle) * mbs * t_mb
    # Data-parallel traffic, the update and what follows the schedule, per rank; the slowest tail wins.
    tails = []
    for r, units, _, _ in ranks:
        issued_dp, exposed_dp, dp_per_mb, gather_after, optimizer, tied, moe_tp = _dp_tail(mdl, units)
        tail = exposed_dp + dp_per_mb * mbs + gather_after + optimizer + tied + moe_tp
        tails.append((tail, r, issued_dp, exposed_dp + dp_per_mb * mbs + gather_after, optimizer, tied, moe_tp))
    tail, tail_rank, issued_dp, exposed_dp, optimizer, tied, moe_tp = max(tails)
    comm = {axis: per_mb.issued[axis] * mbs for axis in AXES}
    comm["dp"] += issued_dp
    comm["pp"] += tied
    comm["tp"] += moe_tp
    exposed = {axis: per_mb.exposed[axis] * mbs for axis in AXES}
    exposed["dp"] += exposed_dp
    exposed["pp"] += tied
    exposed["tp"] += moe_tp
    compute_by_class = {key: per_mb.compute[key] * mbs for key in OP_CLASSES}
    compute = sum(compute_by_class.values())
    notes = []
    if mdl.share < 1.0:
        # Time-shared cores: a rank idle in the pipeline bubble yields its core to ranks with work, so
        # the step is the larger of the busy time (every rank's work at its share of the cores) and
        # the critical path at full speed (compute, optimizer and bubble at share x their time).
        busy = compute + sum(exposed.values()) + optimizer
        path = mdl.share * (compute + optimizer + bubble) + sum(exposed.values())
        notes.append(f"time-shared cores: rank share {mdl.share:.3g} of its rates; schedule idle "
                     f"{bubble:.4g} s at that share, {max(0.0, path - busy):.4g} s left after other ranks fill it")
        bubble = max(0.0, path - busy)
    total = compute + sum(exposed.values()) + bubble + optimizer
    tokens = lay.micro_batch * mbs * lay.dp * batch.seq_len
    model_flops = flops_per_token(model, batch.seq_len, mean_keys) * tokens
    world = lay.tp * lay.pp * lay.cp * lay.dp
    peak = hw.peak_flops(batch.precision.lower())
    mfu = model_flops / (world * peak * total) if peak > 0 else 0.0
    candidates = {"compute": compute, "bubble": bubble, "optimizer": optimizer}
    candidates.update({f"comm:{axis}": exposed[axis] for axis in AXES})
    binding = max(candidates, key=candidates.get)
    notes += [f"{key}: {value}" for key, value in hw.calibration().items()]
    if engine != MYRIAD:
        notes.append(f"engine traits differ from myriad's: {engine}")
    if hw.profile.get("path") and "precision" in hw.profile:
        notes.append(f"profile precision {hw.profile['precision']} (run: {batch.precision})")
    return StepTime(layout=lay.describe(), micro_batches=mbs,
                    chunk_compute_s=tuple(dict(c.compute) for c in chunks), microbatch_s=t_mb, compute_s=compute,
                    compute_by_class_s=compute_by_class, comm_s=comm, exposed_comm_s=exposed, bubble_s=bubble,
                    optimizer_s=optimizer, total_s=total, tokens_per_step=tokens, tokens_per_s=tokens / total,
                    model_flops_per_step=model_flops, mfu=mfu, binding=binding, notes=tuple(notes))
