"""The planner's step-time model (python/myriad/planner/step_time.py) and its hardware data
(hardware.py): FLOPs equal the engine's own count for shipped configs and a hand computation;
the alpha-beta collective formulas and group placement equal hand values; myriad's message sizes
per axis (tp all-reduces, MoE all-to-alls, dp buckets) equal hand values; scaling sanity (dp at a
fixed global batch, tp across nodes, the bubble of the engine's simulated schedule = its closed
form); recompute modes add what myriad recomputes; the machine profile's errors name the key and
the file, and its measured matmul rate scales compute time exactly. Docs: docs/planning.md."""
import dataclasses
import json
import math

import pytest

import myriad
from myriad.planner import hardware as hwmod
from myriad.planner.hardware import MIB, hardware_from, load_profile
from myriad.planner.layout import Batch, Layout, PlanInput, read_config
from myriad.planner.step_time import (AXES, ENGINES, Network, all_to_all_s, flops_per_token, group_placement, p2p_s,
                                      ring_all_gather_s, ring_all_reduce_s, stage_layers, step_time)
from tiny_corpus import write_corpus
from package_under_test import REPO

CONFIGS = {"gpt2_124m": [], "llama_tiny": [], "moe_tiny": ["parallel.ep=1"]}


def flat(gpu, **kwargs):
    """A GPU without the shape-dependent GEMM model: every GEMM at the best-shape rate (flat arithmetic)."""
    return dataclasses.replace(hardware_from(gpu, **kwargs), gemm_model=None)


def config_path(name):
    return f"{REPO}/configs/{name}.yaml"


@pytest.fixture(scope="module")
def engine_flops():
    """flops_per_token of each shipped config's model as the engine builds it (on the meta device: the
    dry run's count; test_the_dry_runs_flops_are_the_engines ties it to a built Engine's)."""
    out = {}
    for name, overrides in CONFIGS.items():
        config = myriad.Config.from_file(config_path(name))
        for item in overrides:
            config.set(item)
        out[name] = myriad.dry_run(config, 1)["flops_per_token"]
    return out


def test_the_dry_runs_flops_are_the_engines(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", lines=200)
    config = myriad.Config.from_file(config_path("llama_tiny"))
    for item in [f"data.path={corpus}", "data.tokenizer=train:300", f"logging.dir={tmp_path / 'run'}",
                 "data.val_fraction=0.5", "logging.measure_peak=false", "logging.level=warn"]:
        config.set(item)
    engine = myriad.Engine(config)
    assert engine.flops_per_token > 0
    assert myriad.dry_run(config, 1)["flops_per_token"] == engine.flops_per_token


@pytest.mark.parametrize("name", list(CONFIGS))
def test_flops_per_token_equals_the_engines(engine_flops, name):
    inp = read_config(config_path(name), overrides=CONFIGS[name])
    assert flops_per_token(inp.model, inp.batch.seq_len) == pytest.approx(engine_flops[name], rel=1e-12)


def test_flops_per_token_equals_the_hand_computation():
    # GPT-2 124M at T 256: 12 blocks of 12 C^2 weights (qkv 3C^2, proj C^2, MLP 8C^2), tied head 50257 C,
    # attention 12 L C * T/2.
    gpt2 = read_config(config_path("gpt2_124m")).model
    C, L, T = 768, 12, 256
    assert flops_per_token(gpt2, T) == 6 * (L * 12 * C * C + 50257 * C) + 12 * L * C * (T / 2) == 755347968
    # LLaMA tiny at T 256: qkv (8 + 2*2) heads * 32 = 384 wide, SwiGLU 3 * C * 704, untied padded head 4096 C.
    llama = read_config(config_path("llama_tiny")).model
    C, L, T = 256, 4, 256
    block = C * 384 + C * C + 3 * C * 704
    assert flops_per_token(llama, T) == 6 * (L * block + 4096 * C) + 12 * L * C * (T / 2)
    # MoE tiny at T 128: router 8 C, top 2 of 8 SwiGLU experts of 352.
    moe = read_config(config_path("moe_tiny"), overrides=["parallel.ep=1"]).model
    C, L, T = 256, 4, 128
    block = C * 384 + C * C + 8 * C + 2 * 3 * C * 352
    assert flops_per_token(moe, T) == 6 * (L * block + 4096 * C) + 12 * L * C * (T / 2)


# ---- collectives ------------------------------------------------------------------------------

def test_alpha_beta_formulas_equal_hand_values():
    alpha, beta = 1e-5, 1.0 / 1e11  # 10 us per step, 100 GB/s
    assert ring_all_reduce_s(1e9, 8, alpha, beta) == pytest.approx(2 * 7 / 8 * 1e-2 + 14 * 1e-5, rel=1e-15)
    assert ring_all_gather_s(1e9, 8, alpha, beta) == pytest.approx(7 / 8 * 1e-2 + 7 * 1e-5, rel=1e-15)
    assert all_to_all_s(8e8, 4, alpha, beta) == pytest.approx(3 / 4 * 8e-3 + 3 * 1e-5, rel=1e-15)
    assert p2p_s(1e9, alpha, beta) == pytest.approx(1e-2 + 1e-5, rel=1e-15)
    assert ring_all_reduce_s(1e9, 1, alpha, beta) == 0.0


def test_group_placement_follows_the_rank_order():
    assert group_placement(8, 1, 8) == (1, 8)  # tp 8 on one node
    assert group_placement(16, 1, 8) == (2, 8)  # tp 16 spans two nodes
    assert group_placement(4, 2, 8) == (1, 4)  # cp 4 over tp 2: 8 consecutive ranks
    assert group_placement(8, 8, 8) == (8, 1)  # dp over tp 8: one member per node
    assert group_placement(64, 1, 8) == (8, 8)  # the moe_1t ep group: 8 nodes
    assert group_placement(3, 1, 8) == (2, 3)  # 3 does not divide a node: some groups straddle two


def test_rings_that_cross_nodes_use_the_network_for_bytes_and_split_their_steps():
    hw = hardware_from("h100", gpus_per_node=8, intra="nvlink4", inter="ib400")
    intra, inter = hwmod.LINKS["nvlink4"], hwmod.LINKS["ib400"]
    net = Network(hw, tp=16, cp=1, dp=1, pp=1, ep=1)  # a tp group of 16 ranks over 2 nodes
    S = 64e6
    # 8 members a node, one NIC each: every rank leaves the node on its own NIC for 1/8 of the channels
    # (1/8 of the bytes at 48 GB/s) and sends the other 7/8 over NVLink (370 GB/s); the slower one binds.
    beta = max(inter.beta_s_per_byte / 8, intra.beta_s_per_byte * 7 / 8)
    expected = 2 * 15 / 16 * S * beta + (30 - 2) * intra.alpha_s + 2 * inter.alpha_s
    assert net.all_reduce("tp", S) == pytest.approx(expected, rel=1e-15)
    # One member a node (dp over tp 8): the ring's bytes all cross its one NIC.
    net = Network(hw, tp=8, cp=1, dp=4, pp=1, ep=1)
    expected = 2 * 3 / 4 * S * inter.beta_s_per_byte + 6 * inter.alpha_s
    assert net.all_reduce("dp", S) == pytest.approx(expected, rel=1e-15)
    inside = Network(hw, tp=8, cp=1, dp=1, pp=1, ep=1)
    assert inside.all_reduce("tp", S) == pytest.approx(
        ring_all_reduce_s(S, 8, intra.alpha_s, intra.beta_s_per_byte), rel=1e-15)
    # All-to-all over 4 nodes x 8: 7/32 of the bytes stay on the node, 24/32 leave through the NIC.
    net = Network(hw, tp=1, cp=1, dp=32, pp=1, ep=32)
    expected = 24 / 32 * S * inter.beta_s_per_byte + 7 * intra.alpha_s + 24 * inter.alpha_s
    assert net.all_to_all("ep", S) == pytest.approx(expected, rel=1e-15)


# ---- message sizes of myriad's axes ----------------------------------------------------------

def plan(model, batch, **layout):
    return PlanInput(model=model, layout=Layout(**layout), batch=batch)


def llama_tiny():
    return read_config(config_path("llama_tiny")).model


def test_tp_traffic_equals_myriads_allreduces():
    # GPT-2 124M, tp 2, no sequence parallelism, no recompute, the all-reduces whole (tp_rings off): per
    # block per micro-batch 2 all-reduces of (B, T, C) f32 forward and 2 backward; the vocab-parallel
    # embedding's forward all-reduce; the loss's two all-reduces of N and 2N floats.
    model = read_config(config_path("gpt2_124m")).model
    batch = Batch(seq_len=256, global_batch=8, precision="bf16")
    hw = hardware_from("h100")
    st = step_time(plan(model, batch, tp=2, micro_batch=4, gradient_accumulation=2), hw,
                   dataclasses.replace(ENGINES["myriad"], tp_rings=False))
    link = hwmod.LINKS["nvlink4"]
    N, C = 4 * 256, 768
    ar = lambda nbytes: ring_all_reduce_s(nbytes, 2, link.alpha_s, link.beta_s_per_byte)  # noqa: E731
    per_mb = 12 * 4 * ar(N * C * 4) + ar(N * C * 4) + ar(4 * N) + ar(8 * N)
    assert st.comm_s["tp"] == pytest.approx(2 * per_mb, rel=1e-12)
    assert st.exposed_comm_s["tp"] == pytest.approx(2 * per_mb, rel=1e-12)  # on the critical path


def test_sequence_parallel_rings_hide_each_step_behind_a_gemm_block():
    # GPT-2 124M, tp 2 with sequence parallelism, no recompute, flat H100 (GEMM time = FLOPs / rate, no
    # overlap slowdown): myriad's rings (EngineTraits.tp_rings) issue what the plain gathers and
    # reduce-scatters issue (t = 2: one step of S / 2), and each of a block's 10 rings per micro-batch
    # (forward: qkv, fc gathers, proj, out reduce-scatters; backward: out, proj gathers, qkv, fc
    # reduce-scatters, and the re-gathers of the norm outputs beside qkv's and fc's weight gradients)
    # hides min(step, GEMM / 2) of it, the GEMM being the one beside the ring.
    model = read_config(config_path("gpt2_124m")).model
    batch = Batch(seq_len=256, global_batch=8, precision="bf16")
    hw = flat("h100")
    inp = plan(model, batch, tp=2, sequence_parallel=True, micro_batch=4, gradient_accumulation=2)
    rings = step_time(inp, hw)
    plain = step_time(inp, hw, dataclasses.replace(ENGINES["myriad"], tp_rings=False))
    assert rings.compute_by_class_s["matmul"] == pytest.approx(plain.compute_by_class_s["matmul"], rel=1e-12)
    assert rings.comm_s["tp"] == pytest.approx(plain.comm_s["tp"], rel=1e-12)
    assert plain.exposed_comm_s["tp"] == pytest.approx(plain.comm_s["tp"], rel=1e-12)
    link = hwmod.LINKS["nvlink4"]
    N, C = 4 * 256, 768
    step = p2p_s(N * C * 4 / 2, link.alpha_s, link.beta_s_per_byte)
    rate = hw.matmul_flops_per_s("bf16", 2) * hw.rank_share(2)
    gemm = lambda n, k: 2.0 * N * n * k / rate  # noqa: E731
    per_block = [gemm(3 * C / 2, C), gemm(C, C / 2), gemm(4 * C / 2, C), gemm(C, 4 * C / 2)]  # qkv, proj, fc, out
    per_pass = sum(min(step, g / 2) for g in per_block)
    regathers = min(step, per_block[0] / 2) + min(step, per_block[2] / 2)
    hidden = 12 * 2 * (2 * per_pass + regathers)  # layers x micro-batches
    assert 0 < hidden < plain.comm_s["tp"]
    assert rings.exposed_comm_s["tp"] == pytest.approx(plain.exposed_comm_s["tp"] - hidden, rel=1e-9)


def test_all_reduces_in_blocks_hide_behind_the_next_block():
    # The same without sequence parallelism: myriad's all-reduces after proj and out (forward) and of
    # qkv's and fc's input gradients (backward) run in 2 row blocks, the first in flight while the GEMM
    # produces the second: issued 2 all-reduces of S / 2 each, exposed min(ar, GEMM / 2) less than that
    # for the first block, the second whole.
    model = read_config(config_path("gpt2_124m")).model
    batch = Batch(seq_len=256, global_batch=8, precision="bf16")
    hw = flat("h100")
    inp = plan(model, batch, tp=2, micro_batch=4, gradient_accumulation=2)
    blocks = step_time(inp, hw)
    plain = step_time(inp, hw, dataclasses.replace(ENGINES["myriad"], tp_rings=False))
    assert blocks.compute_by_class_s["matmul"] == pytest.approx(plain.compute_by_class_s["matmul"], rel=1e-12)
    link = hwmod.LINKS["nvlink4"]
    N, C = 4 * 256, 768
    ar = lambda nbytes: ring_all_reduce_s(nbytes, 2, link.alpha_s, link.beta_s_per_byte)  # noqa: E731
    per_pass = 2 * (2 * ar(N * C * 4 / 2) - ar(N * C * 4))  # two reductions, each 2 blocks instead of 1
    assert blocks.comm_s["tp"] == pytest.approx(plain.comm_s["tp"] + 12 * 2 * 2 * per_pass, rel=1e-12)
    rate = hw.matmul_flops_per_s("bf16", 2) * hw.rank_share(2)
    gemm = lambda n, k: 2.0 * N * n * k / rate  # noqa: E731
    proj, out, qkv, fc = gemm(C, C / 2), gemm(C, 4 * C / 2), gemm(3 * C / 2, C), gemm(4 * C / 2, C)
    block = ar(N * C * 4 / 2)
    exposed = sum(max(0.0, block - g / 2) + block for g in (proj, out, qkv, fc))  # per block per micro-batch
    expected = plain.exposed_comm_s["tp"] - 12 * 2 * 4 * ar(N * C * 4) + 12 * 2 * exposed
    assert blocks.exposed_comm_s["tp"] == pytest.approx(expected, rel=1e-9)


def test_moe_exchange_moves_top_k_rows_per_token_both_ways():
    # moe_tiny at ep 2 (one node): per MoE layer and pass, a counts all-to-all (E int64) and two all-to-alls
    # of top_k * T rows of C f32 per sequence (capacity 40 per expert per sequence is not binding on average).
    inp = read_config(config_path("moe_tiny"), world=2)
    hw = hardware_from("h100")
    st = step_time(inp, hw)
    link = hwmod.LINKS["nvlink4"]
    a2a = lambda nbytes: all_to_all_s(nbytes, 2, link.alpha_s, link.beta_s_per_byte)  # noqa: E731
    rows_bytes = 8 * 2 * 128 * 256 * 4  # B 8 sequences x top_k 2 x T 128 rows of C 256 f32
    per_pass = a2a(8 * 8) + 2 * a2a(rows_bytes)
    assert st.comm_s["ep"] == pytest.approx(4 * 2 * per_pass, rel=1e-12)  # 4 layers, forward and backward


def test_ring_attention_passes_k_and_v_round_the_cp_ring():
    # GPT-2 124M at cp 4 (one node): per layer, forward cp-1 shifts of the packed K and V of the rank's
    # N = B T / cp tokens (2 N C f32), backward cp-1 shifts of K/V and cp of their gradients.
    model = read_config(config_path("gpt2_124m")).model
    batch = Batch(seq_len=1024, global_batch=4, precision="bf16")
    st = step_time(plan(model, batch, cp=4, micro_batch=2, gradient_accumulation=2), hardware_from("h100"))
    link = hwmod.LINKS["nvlink4"]
    N, C = 2 * 1024 // 4, 768
    shift = p2p_s(2 * N * C * 4, link.alpha_s, link.beta_s_per_byte)
    assert st.comm_s["cp"] == pytest.approx(2 * 12 * (3 + 7) * shift, rel=1e-12)
    assert 0 < st.exposed_comm_s["cp"] < st.comm_s["cp"]  # transfers hide behind the ring steps' attention


def test_dp_bucket_traffic_is_the_ranks_f32_parameters():
    # LLaMA tiny parameters (untied, no biases, RMSNorm): blocks 4 x (2C + 384C + C^2 + 3 C 704),
    # embedding 4096 C, final norm C + lm_head 4096 C.
    model = llama_tiny()
    C = 256
    psi = 4 * (2 * C + 384 * C + C * C + 3 * C * 704) + 4096 * C + C + 4096 * C
    assert psi == 4917504
    batch = Batch(seq_len=256, global_batch=16, precision="fp32")
    hw = hardware_from("h100")
    link = hwmod.LINKS["nvlink4"]
    zero0 = step_time(plan(model, batch, dp=4, micro_batch=4, bucket_mb=0), hw)
    assert zero0.comm_s["dp"] == pytest.approx(ring_all_reduce_s(4 * psi, 4, link.alpha_s, link.beta_s_per_byte),
                                               rel=1e-12)
    # bucket_mb 0: one reduction after the whole backward, nothing overlaps it.
    assert zero0.exposed_comm_s["dp"] == pytest.approx(zero0.comm_s["dp"], rel=1e-12)
    zero1 = step_time(plan(model, batch, dp=4, micro_batch=4, bucket_mb=0, zero_stage=1), hw)
    rs = ring_all_gather_s(4 * psi, 4, link.alpha_s, link.beta_s_per_byte)
    assert zero1.comm_s["dp"] == pytest.approx(2 * rs, rel=1e-12)  # reduce-scatter + all-gather of values
    # With buckets the reduction overlaps the backward: less is exposed than issued.
    bucketed = step_time(plan(model, batch, dp=4, micro_batch=4, bucket_mb=1), hw)
    assert bucketed.exposed_comm_s["dp"] < bucketed.comm_s["dp"]


# ---- scaling sanity -----------------------------------------------------------------------------

def test_doubling_dp_at_a_fixed_global_batch_halves_compute_per_rank():
    model, hw = llama_tiny(), hardware_from("h100")
    batch = Batch(seq_len=256, global_batch=64, precision="bf16")
    two = step_time(plan(model, batch, dp=2, micro_batch=4, gradient_accumulation=8), hw)
    four = step_time(plan(model, batch, dp=4, micro_batch=4, gradient_accumulation=4), hw)
    assert four.compute_s == pytest.approx(two.compute_s / 2, rel=1e-12)
    assert four.tokens_per_step == two.tokens_per_step == 64 * 256


def test_tp_across_nodes_is_slower_than_within_a_node():
    model = read_config(config_path("gpt2_124m")).model
    batch = Batch(seq_len=1024, global_batch=8, precision="bf16")
    inp = plan(model, batch, tp=4, micro_batch=8)
    inside = step_time(inp, hardware_from("h100", gpus_per_node=8))
    across = step_time(inp, hardware_from("h100", gpus_per_node=1))  # each tp rank on its own node
    assert across.exposed_comm_s["tp"] > 5 * inside.exposed_comm_s["tp"]
    assert across.total_s > inside.total_s
    assert across.compute_s == inside.compute_s


@pytest.mark.parametrize("schedule,p,v,m", [("1f1b", 4, 1, 4), ("gpipe", 4, 1, 8), ("1f1b", 4, 1, 16),
                                             ("interleaved", 2, 3, 4), ("interleaved", 3, 2, 9)])
def test_bubble_is_the_closed_form(schedule, p, v, m):
    model, hw = read_config(config_path("gpt2_124m")).model, hardware_from("h100")
    batch = Batch(seq_len=256, global_batch=m, precision="bf16")
    st = step_time(plan(model, batch, pp=p, virtual_stages=v, schedule=schedule, micro_batch=1,
                        gradient_accumulation=m, zero_stage=1), hw)
    makespan = m * st.microbatch_s + st.bubble_s
    assert st.bubble_s / makespan == pytest.approx((p - 1) / (v * m + p - 1), rel=1e-12)


def test_the_step_is_the_sum_of_its_parts():
    inp = read_config(f"{REPO}/configs/moe_1t.yaml", world=2048)
    st = step_time(inp, hardware_from("h100", 8, "nvlink4", "ib400"))
    assert st.total_s == pytest.approx(st.compute_s + sum(st.exposed_comm_s.values()) + st.bubble_s + st.optimizer_s,
                                       rel=1e-12)
    assert set(st.comm_s) == set(st.exposed_comm_s) == set(AXES)
    assert all(st.exposed_comm_s[a] <= st.comm_s[a] * (1 + 1e-12) for a in AXES)
    assert st.tokens_per_s == pytest.approx(4096 * 4096 / st.total_s, rel=1e-12)
    assert 0 < st.mfu < 1
    peak = hwmod.DEVICES["h100"].bf16_flops
    assert st.mfu == pytest.approx(st.model_flops_per_step / (2048 * peak * st.total_s), rel=1e-12)


def test_recompute_adds_what_myriad_recomputes():
    # full: one more forward of the blocks (2 N weights FLOPs per layer); selective: norms and the MLP
    # activation only (TransformerBlock::recompute), no GEMM.
    model, hw = llama_tiny(), flat("h100")
    batch = Batch(seq_len=256, global_batch=8, precision="bf16")
    runs = {mode: step_time(plan(model, batch, micro_batch=4, gradient_accumulation=2, recompute=mode), hw)
            for mode in ("none", "selective", "full")}
    C, N = 256, 4 * 256
    block_weights = C * 384 + C * C + 3 * C * 704
    extra = 2 * (2.0 * N * 4 * block_weights) / hw.matmul_flops_per_s("bf16")
    assert runs["selective"].compute_by_class_s["matmul"] == runs["none"].compute_by_class_s["matmul"]
    assert runs["selective"].compute_by_class_s["memory"] > runs["none"].compute_by_class_s["memory"]
    assert runs["full"].compute_by_class_s["matmul"] - runs["none"].compute_by_class_s["matmul"] == pytest.approx(
        extra, rel=1e-12)


def test_layouts_the_engine_refuses_are_refused():
    model, hw = llama_tiny(), hardware_from("h100")
    batch = Batch(seq_len=256, global_batch=8, precision="bf16")
    with pytest.raises(ValueError, match="ZeRO-2 with pp 2"):
        step_time(plan(model, batch, pp=2, micro_batch=1, gradient_accumulation=8, zero_stage=2), hw)
    with pytest.raises(ValueError, match="global batch 8"):
        step_time(plan(model, batch, dp=2, micro_batch=1), hw)
    with pytest.raises(ValueError, match="n_layer \\(4\\) must be divisible"):
        step_time(plan(model, batch, pp=3, micro_batch=1, gradient_accumulation=8), hw)
    with pytest.raises(ValueError, match="no inter-node link"):
        step_time(plan(model, batch, tp=2, micro_batch=8), hardware_from("h100", gpus_per_node=1, inter="none"))
    assert stage_layers(8, 2, 2, (1, 3, 2, 2)) == [1, 3, 2, 2]


# ---- hardware data and profiles ---------------------------------------------------------------

def test_datasheet_figures_are_dense_and_capacities_are_bytes():
    h100 = hwmod.DEVICES["h100"]
    assert h100.bf16_flops == 989.5e12 and h100.peak_flops("bf16") == h100.bf16_flops
    assert h100.hbm_bytes == 81559 * MIB == 85520809984  # "80GB": 85.5e9 bytes, 79.6 GiB
    assert h100.peak_flops("fp32") == 67e12
    for name, spec in hwmod.DEVICES.items():
        assert spec.bf16_flops > spec.tf32_flops > spec.fp32_flops > 0, name
        assert spec.source, name
    for name, link in hwmod.LINKS.items():
        assert link.beta_s_per_byte == pytest.approx(1 / (link.line_bytes_per_s * link.achievable_fraction))
        assert 0 < link.achievable_fraction < 1 and link.source, name
    assert hwmod.LINKS["ib400"].bytes_per_s == pytest.approx(48e9)  # 400 Gb/s = 50 GB/s line, 48 achieved


def profile(**changes):
    data = {"schema": "myriad.machine_profile/1", "machine": "test VM", "date": "2026-12-03",
            "command": "bench_gemm --profile p.json", "peak_flops_per_s": 3.5e11,
            "compute": {"matmul_flops_per_s": 2.0e11, "memory_bytes_per_s": 1.0e10},
            "links": {"intra": {"alpha_s": 2e-5, "beta_s_per_byte": 2e-10, "measured_with": "bench_collectives"}}}
    data.update(changes)
    return data


def write(tmp_path, data):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    return path


def test_profile_errors_name_the_key_and_the_file(tmp_path):
    bad = profile()
    del bad["compute"]["matmul_flops_per_s"]
    path = write(tmp_path, bad)
    with pytest.raises(ValueError, match="profile.json.*compute.matmul_flops_per_s"):
        load_profile(path)
    with pytest.raises(ValueError, match="profile.json.*'schema'.*myriad.machine_profile/1"):
        load_profile(write(tmp_path, profile(schema="other/1")))
    with pytest.raises(ValueError, match="'peak_flops_per_s' must be > 0"):
        load_profile(write(tmp_path, profile(peak_flops_per_s=-1)))
    missing = profile(links={"inter": {"alpha_s": 1e-5}})
    with pytest.raises(ValueError, match="links.inter.beta_s_per_byte"):
        load_profile(write(tmp_path, missing))
    no_date = profile()
    del no_date["date"]
    with pytest.raises(ValueError, match="missing key 'date'"):
        load_profile(write(tmp_path, no_date))
    with pytest.raises(ValueError, match="not JSON"):
        (tmp_path / "broken.json").write_text("{")
        load_profile(tmp_path / "broken.json")
    with pytest.raises(ValueError, match="cpu_host needs 'compute.memory_bytes_per_s'"):
        no_memory = profile()
        del no_memory["compute"]["memory_bytes_per_s"]
        hardware_from("cpu_host", profile=write(tmp_path, no_memory))
    with pytest.raises(ValueError, match="cpu_host has no datasheet"):
        hardware_from("cpu_host")


def test_a_measured_matmul_rate_scales_compute_time_proportionally(tmp_path):
    model = llama_tiny()
    batch = Batch(seq_len=256, global_batch=8, precision="bf16")
    inp = plan(model, batch, micro_batch=8)
    slow = step_time(inp, hardware_from("h100", profile=write(tmp_path, profile())))
    fast_profile = profile(compute={"matmul_flops_per_s": 6.0e11, "memory_bytes_per_s": 1.0e10})
    fast = step_time(inp, hardware_from("h100", profile=write(tmp_path, fast_profile)))
    assert fast.compute_by_class_s["matmul"] == pytest.approx(slow.compute_by_class_s["matmul"] / 3, rel=1e-12)
    assert fast.compute_by_class_s["memory"] == slow.compute_by_class_s["memory"]
    hw = hardware_from("h100", profile=write(tmp_path, profile()))
    assert hw.matmul.calibrated and not hw.attention.calibrated and hw.intra.calibrated
    assert hw.peak_flops("bf16") == hwmod.DEVICES["h100"].bf16_flops  # MFU stays over the datasheet peak
    # Without a profile and with flat rates: the datasheet peak times the best-shape efficiency.
    datasheet = step_time(inp, flat("h100"))
    assert datasheet.compute_by_class_s["matmul"] * hardware_from("h100").matmul_flops_per_s("bf16") == pytest.approx(
        slow.compute_by_class_s["matmul"] * 2.0e11, rel=1e-12)


def test_cpu_host_takes_every_number_from_the_profile(tmp_path):
    hw = hardware_from("cpu_host", profile=write(tmp_path, profile(ranks_per_node=8)))
    assert hw.device is None and hw.gpus_per_node == 8 and hw.inter is None
    assert hw.peak_flops("fp32") == 3.5e11 and hw.matmul_flops_per_s("fp32") == 2.0e11
    model = llama_tiny()
    batch = Batch(seq_len=256, global_batch=8, precision="fp32")
    st = step_time(plan(model, batch, dp=2, micro_batch=4), hw)
    assert st.mfu == pytest.approx(st.model_flops_per_step / (2 * 3.5e11 * st.total_s), rel=1e-12)
    link = hw.intra
    psi = 4917504
    buckets = st.comm_s["dp"]
    assert buckets >= ring_all_reduce_s(4 * psi, 2, link.alpha_s, link.beta_s_per_byte) * (1 - 1e-12)
    assert math.isfinite(st.total_s)
    assert dataclasses.replace(hw, gpus_per_node=4).gpus_per_node == 4
