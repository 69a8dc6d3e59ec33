"""The planner's inputs: the model's shape, the parallel layout and the batch, read from a config.

`read_config(path or myriad.Config)` resolves the config with the engine's own rules (the C++
`Config.resolved()`: derived widths, auto keys) and returns a `PlanInput`. Every value here is a
value the engine uses, read through the generic config binding (`cfg.resolved().to_dict()` and
`cfg.derived()`, python/myriad/config_values.py): ModelShape holds the model's sizes as the C++
ModelConfig computes them (padded vocabulary, kv heads, head width, MLP widths, tied embeddings,
biases, MoE values in use) — nothing is defaulted or derived here — Layout the `parallel:`
section with dp settled for the world, Batch the `training:` section's batch and precision.
`Layout.world` = tp * pp * cp * dp (ep is carved out of dp: it must divide dp). Plain data: the
search makes copies with dataclasses.replace.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..config_values import model_in_use


@dataclass(frozen=True)
class ModelShape:
    """The transformer's sizes, every derived value settled (model: section, docs/config.md)."""
    family: str  # gpt2 | llama (the blocks' family; moe models follow moe_base)
    vocab_size: int
    n_layer: int
    n_head: int
    n_kv_head: int
    n_embd: int
    context_length: int
    ffn_hidden: int
    tie_embeddings: bool
    bias: bool
    padded_vocab: int  # vocab_size rounded up as the engine's embedding rows (model.padded_vocab_size)
    head_dim: int  # n_embd / n_head (model.head_dim)
    # Mixture of experts (num_experts 0: dense).
    num_experts: int = 0
    top_k: int = 0
    moe_every: int = 1
    expert_ffn: int = 0
    shared_experts: int = 0
    expert_capacity: int = 0
    capacity_factor: float = 1.25
    dropless: bool = False
    block_sparse: bool = False  # model.attention.kind block_sparse (dense attention otherwise)
    # A published model's block where it is neither family's (the validation's rows, e.g. Nemotron-4:
    # LayerNorm, RoPE and a two-matrix squared-ReLU MLP); "" = the family's. The engine builds only the
    # two families, so only step_time reads these.
    norm: str = ""  # layernorm | rmsnorm
    mlp: str = ""  # two_matrix (GELU, squared ReLU: the same GEMMs and bytes) | swiglu
    positions: str = ""  # learned | rope

    @property
    def qkv_width(self) -> int:
        return (self.n_head + 2 * self.n_kv_head) * self.head_dim

    @property
    def layernorm(self) -> bool:
        return self.norm == "layernorm" if self.norm else self.family == "gpt2"

    @property
    def swiglu(self) -> bool:
        return self.mlp == "swiglu" if self.mlp else self.family == "llama"

    @property
    def learned_positions(self) -> bool:
        return self.positions == "learned" if self.positions else self.family == "gpt2"

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.swiglu else 2

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_moe_layer(self, layer: int) -> bool:
        return self.is_moe and (layer + 1) % self.moe_every == 0

    def moe_layers(self) -> int:
        return sum(1 for layer in range(self.n_layer) if self.is_moe_layer(layer))


@dataclass(frozen=True)
class Layout:
    """How the world's ranks split the work (parallel: section) and the micro-batching."""
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    virtual_stages: int = 1
    schedule: str = "1f1b"  # 1f1b | gpipe | interleaved
    zero_stage: int = 0
    sequence_parallel: bool = False
    recompute: str = "none"  # none | selective | full
    micro_batch: int = 1  # sequences per micro-batch per dp rank
    gradient_accumulation: int = 1  # micro-batches per step per dp rank
    bucket_mb: float = 8.0
    pp_layers: tuple = ()  # layers per global stage; empty = even split

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    def describe(self) -> str:
        parts = [f"tp{self.tp}", f"pp{self.pp}"]
        if self.virtual_stages > 1:
            parts.append(f"v{self.virtual_stages}")
        parts += [f"dp{self.dp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        parts.append(f"mb{self.micro_batch}x{self.gradient_accumulation}")
        parts.append(f"z{self.zero_stage}")
        if self.sequence_parallel and self.tp > 1:
            parts.append("sp")
        if self.recompute != "none":
            parts.append(f"rc-{self.recompute}")
        return " ".join(parts)


@dataclass(frozen=True)
class Batch:
    """The step's tokens and numerics (training: section)."""
    seq_len: int
    global_batch: int  # sequences per optimizer step
    precision: str = "fp32"  # fp32 | bf16 | fp16
    optimizer: str = "adamw"
    device: str = "cpu"
    # How dp exchanges gradients (the step-time model times the exact ring all-reduce every step;
    # anything else is named in the plan's notes): training.gradient_compression, training.sync,
    # parallel.dp_reduce, parallel.dp_reduce_exact.
    gradient_compression: str = "none"
    sync: str = "every_step"
    dp_reduce: str = "auto"
    dp_reduce_exact: bool = False

    def unmodelled_exchange(self) -> list:
        """The config keys whose effect on dp communication the step-time model does not time."""
        out = []
        if self.optimizer != "adamw":
            out.append(f"training.optimizer {self.optimizer} (1-bit Adam compresses dp after its warm-up)")
        if self.gradient_compression != "none":
            out.append(f"training.gradient_compression {self.gradient_compression}")
        if self.sync != "every_step":
            out.append(f"training.sync {self.sync} (dp all-reduces every training.local_steps steps)")
        if self.dp_reduce not in ("auto", "ring"):
            out.append(f"parallel.dp_reduce {self.dp_reduce} (timed as a ring)")
        if self.dp_reduce_exact:
            out.append("parallel.dp_reduce_exact (exact sums: a ring of wider values, timed as f32)")
        return out


@dataclass(frozen=True)
class PlanInput:
    model: ModelShape
    layout: Layout
    batch: Batch
    config_yaml: str = ""  # the resolved config the values came from
    config_source: str = ""
    overrides: tuple = field(default_factory=tuple)


def model_shape(config) -> ModelShape:
    """ModelShape of a myriad.Config: the model's values in use as the C++ config gives them."""
    m = model_in_use(config)
    return ModelShape(
        family=m["family"], vocab_size=m["vocab_size"], n_layer=m["n_layer"], n_head=m["n_head"],
        n_kv_head=m["n_kv_head"], n_embd=m["n_embd"], context_length=m["context_length"], ffn_hidden=m["ffn_hidden"],
        tie_embeddings=m["tie_embeddings"], bias=m["bias"], padded_vocab=m["padded_vocab_size"],
        head_dim=m["head_dim"], num_experts=m["num_experts"], top_k=m["moe_top_k"], moe_every=m["moe_every"],
        expert_ffn=m["expert_ffn"] if m["num_experts"] else 0, shared_experts=m["shared_experts"],
        expert_capacity=m["expert_capacity"], capacity_factor=m["moe_capacity_factor"], dropless=m["dropless"],
        block_sparse=m["attention.kind"] == "block_sparse")


def layout_of(parallel: dict, training: dict) -> Layout:
    """Layout from the resolved `parallel:` and `training:` sections (Config.to_dict())."""
    return Layout(
        tp=parallel["tp"], pp=parallel["pp"], dp=parallel["dp"] or 1, cp=parallel["cp"], ep=parallel["ep"],
        virtual_stages=parallel["virtual_stages"], schedule=parallel["pp_schedule"], zero_stage=parallel["zero_stage"],
        sequence_parallel=parallel["sequence_parallel"], recompute=training["recompute"],
        micro_batch=training["micro_batch"], gradient_accumulation=training["gradient_accumulation"],
        bucket_mb=parallel["bucket_mb"], pp_layers=tuple(int(x) for x in parallel["pp_layers"]))


def read_config(config, world: int = 0, overrides=()) -> PlanInput:
    """PlanInput from a config file path or a myriad.Config; `world` > 0 settles parallel.dp auto for it
    (parallel.dp auto without a world counts as 1).

    The engine's own parser reads and checks the config (every key, every derived value), so the
    planner sees exactly what a run would.
    """
    from .. import _myriad

    source = ""
    if isinstance(config, (str, bytes)) or hasattr(config, "__fspath__"):
        source = str(config)
        config = _myriad.Config.from_file(source)
    for item in overrides:
        config.set(item)
    if world > 0:
        config.validate(world)
    resolved = config.resolved()
    values = resolved.to_dict()
    parallel, training = values["parallel"], values["training"]
    if training["precision"] == "fp8":
        raise ValueError(f"{source}: training.precision fp8 is not costed by the planner yet: its step-time model has "
                         "no measured FP8 GEMM rates (no FP8 run on a GPU to ground them); plan with "
                         "--set training.precision=bf16, whose persistent memory fp8 shares (fp32 master, bf16 "
                         "compute copy, moments; the FP8 operands are per-GEMM scratch)")
    layout = layout_of(parallel, training)
    batch = Batch(seq_len=training["seq_len"], global_batch=training["global_batch_size"],
                  precision=training["precision"], optimizer=training["optimizer"], device=training["device"],
                  gradient_compression=training["gradient_compression"], sync=training["sync"],
                  dp_reduce=parallel["dp_reduce"], dp_reduce_exact=parallel["dp_reduce_exact"])
    return PlanInput(model=model_shape(config), layout=layout, batch=batch, config_yaml=resolved.to_yaml(),
                     config_source=source, overrides=tuple(overrides))


def stage_layers(n_layer: int, pp: int, virtual_stages: int = 1, pp_layers=()) -> list:
    """Layers per global stage, as the engine splits them (ParallelConfig::stage_layers): pp_layers as
    given, else an even split; a split it refuses raises ValueError with its reason."""
    from .. import _myriad
    try:
        return _myriad.stage_layers(n_layer, pp, virtual_stages, [str(x) for x in pp_layers])
    except _myriad.Error as e:
        raise ValueError(str(e).split("] ", 1)[-1]) from None


def replace(obj, **changes):
    """dataclasses.replace, re-exported for the search."""
    return dataclasses.replace(obj, **changes)
