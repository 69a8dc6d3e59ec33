"""The planner's memory model: the ZeRO paper's worked example exactly, and myriad's own per-rank
bytes equal to the dry run (the engine built rank by rank on the meta device) for every rank role
of the 175B dense and 1.6T MoE layouts and for every rank of small layouts of every axis."""
import os

import pytest

import myriad
from myriad.planner import memory
from myriad.planner.layout import read_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIELDS = ["parameter_elements", "shard_elements", "optimizer_elements", "master_weight_bytes",
          "compute_weight_bytes", "gradient_bytes", "optimizer_bytes", "activation_bytes", "activation_slots",
          "total_bytes"]


def config_path(name):
    return os.path.join(ROOT, "configs", name)


def assert_planner_equals_dry_run(path, world, overrides=(), ranks=None):
    inp = read_config(path, world, overrides)
    config = myriad.Config.from_file(path)
    for item in overrides:
        config.set(item)
    ranks = memory.rank_roles(inp.layout) if ranks is None else ranks
    for rank in ranks:
        dry = myriad.dry_run(config, world, rank)
        planned = memory.rank_memory(inp, rank)
        for field in FIELDS:
            assert getattr(planned, field) == dry[field], (path, overrides, dry["role"], field)
        assert dry["total_bytes"] == planned.total_bytes
    return inp


def test_zero_paper_worked_example_exactly():
    # ZeRO (Rajbhandari et al. 2020), Figure 1: 7.5B parameters, Adam (K = 12), 64-way data parallelism.
    expected_gb = [120.0, 31.4, 16.6, 1.9]
    exact = [120e9, 30e9 + 12 * 7.5e9 / 64, 15e9 + 14 * 7.5e9 / 64, 16 * 7.5e9 / 64]
    for stage in range(4):
        m = memory.zero_paper(7.5e9, 64, stage)
        assert m.total == pytest.approx(exact[stage], rel=1e-12)
        assert round(m.total / 1e9, 1) == expected_gb[stage]
    with pytest.raises(ValueError, match="zero stage 4"):
        memory.zero_paper(1e9, 8, 4)


def test_gpt3_175b_every_role_equals_the_dry_run():
    inp = assert_planner_equals_dry_run(config_path("gpt3_175b.yaml"), 1024)
    roles = memory.rank_roles(inp.layout)
    total = 0
    for pp in range(16):  # one tp rank per stage holds 1/8 of each stage's parameters
        for tp in range(8):
            rank = memory.rank_of(inp.layout, memory.GridCoord(tp=tp, pp=pp))
            params = memory.parameter_layout(inp, memory.coords(inp.layout, rank))
            total += params.real_elements()
    # The blocks' 12 C^2 + 7 C split over tp, the 6 C of norms and row-parallel biases on every tp rank; the
    # embeddings, the tied head's copy on the last stage; positions and the final norm on every tp rank.
    C, L, V, tp = 12288, 96, 50304, 8
    blocks = L * (12 * C * C + 7 * C + tp * 6 * C)
    assert total == blocks + 2 * V * C + tp * (2048 * C + 2 * C)
    assert len(roles) == 256


@pytest.mark.parametrize("overrides", [
    ["parallel.zero_stage=0", "parallel.sequence_parallel=false", "training.recompute=selective"],
    ["parallel.pp=8", "parallel.dp=16", "parallel.virtual_stages=3", "parallel.pp_schedule=interleaved"],
    ["parallel.pp=1", "parallel.dp=128", "parallel.zero_stage=3", "training.recompute=none"],
    ["parallel.pp=4", "parallel.dp=16", "parallel.cp=2", "training.precision=fp32", "training.device=cpu"],
])
def test_gpt3_175b_other_layouts_equal_the_dry_run(overrides):
    assert_planner_equals_dry_run(config_path("gpt3_175b.yaml"), 1024, overrides)


def test_moe_1_6t_every_role_equals_the_dry_run():
    inp = assert_planner_equals_dry_run(config_path("moe_1t.yaml"), 2048)
    peak = memory.peak_rank_memory(inp)
    assert peak.coord.pp == 0  # 1F1B's first stage keeps the most micro-batches in flight
    assert peak.activation_slots == 16
    assert 2.5e9 < peak.parameter_elements < 2.7e9


def test_moe_1_6t_with_tensor_parallel_and_no_zero_equals_the_dry_run():
    assert_planner_equals_dry_run(config_path("moe_1t.yaml"), 2048, [
        "parallel.pp=8", "parallel.tp=2", "parallel.ep=16", "parallel.zero_stage=0", "training.recompute=selective",
        "training.micro_batch=2", "training.gradient_accumulation=16"])


SMALL = """
model: {architecture: ARCH, vocab_size: 300, n_layer: 4, n_head: 4, n_kv_head: KV, n_embd: 64, context_length: 32}
training: {micro_batch: 2, gradient_accumulation: 4, seq_len: 32}
"""


@pytest.mark.parametrize("arch,kv,world,overrides", [
    ("gpt2", 4, 8, ["parallel.tp=2", "parallel.pp=2", "parallel.zero_stage=1", "parallel.bucket_mb=0.01"]),
    ("llama", 2, 4, ["parallel.tp=2", "parallel.sequence_parallel=true", "training.precision=bf16"]),
    ("gpt2", 4, 4, ["parallel.zero_stage=2", "training.recompute=selective", "training.precision=fp16"]),
    ("llama", 4, 4, ["parallel.zero_stage=3", "training.recompute=full", "training.precision=bf16"]),
    ("gpt2", 4, 4, ["parallel.pp=2", "parallel.virtual_stages=2", "parallel.pp_schedule=interleaved"]),
    ("gpt2", 4, 4, ["parallel.tp=2", "training.precision=bf16", "training.recompute=none"]),  # 16-bit h1, h2, act
    ("llama", 4, 4, ["parallel.pp=2", "training.precision=fp16", "training.recompute=selective"]),
    ("llama", 4, 6, ["parallel.pp=3", "parallel.pp_schedule=gpipe", "parallel.pp_layers=[2,1,1]"]),
    ("llama", 2, 8, ["parallel.cp=2", "parallel.tp=2", "parallel.zero_stage=1"]),
])
def test_every_rank_of_small_layouts_equals_the_dry_run(tmp_path, arch, kv, world, overrides):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL.replace("ARCH", arch).replace("KV", str(kv)))
    assert_planner_equals_dry_run(str(path), world, overrides, ranks=range(world))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])  # bf16: h2 stays f32 (the router reads it)
def test_every_rank_of_a_small_expert_parallel_layout_equals_the_dry_run(tmp_path, precision):
    path = tmp_path / "moe.yaml"
    path.write_text("""
model: {architecture: moe, vocab_size: 300, n_layer: 4, n_head: 4, n_embd: 64, context_length: 32,
        num_experts: 4, top_k: 2, moe_every: 2, shared_experts: 1, expert_ffn_hidden: 96}
training: {micro_batch: 2, gradient_accumulation: 2, seq_len: 32}
""")
    assert_planner_equals_dry_run(str(path), 8, ["parallel.ep=2", "parallel.dp=4", "parallel.tp=2",
                                                 "parallel.zero_stage=1", "parallel.bucket_mb=0.02",
                                                 f"training.precision={precision}", "training.recompute=none"],
                                   ranks=range(8))


def test_bad_rank_is_refused():
    inp = read_config(config_path("gpt3_175b.yaml"), 1024)
    with pytest.raises(ValueError, match="rank 1024 is not a rank of a world of 1024"):
        memory.rank_memory(inp, 1024)
    with pytest.raises(myriad.Error, match="not a rank"):
        myriad.dry_run(myriad.Config.from_file(config_path("gpt3_175b.yaml")), 1024, 1024)
