"""The planner's shape-dependent kernel times (python/myriad/planner/gemm.py) and what they change in
the step-time model: tile and wave quantisation against hand counts, the HBM floor of thin GEMMs,
thin tensor-parallel shards running below the whole GEMM's rate, materialised attention computing
the full T x T scores, dp traffic hiding behind compute only (not behind communication on the path),
an engine that reduces gradients after the backward exposing all of it, transfers sharing a link,
PCIe, the published-runs table's arithmetic, the GEMM check against a profile, and the docs showing
today's validation table. Docs: docs/planning.md ("Kernel times from shapes", "Validation")."""
import dataclasses
import math

import pytest

from myriad.planner import validation
from myriad.planner.gemm import GEMM_MODELS, flash_seconds, gemm_seconds
from myriad.planner.hardware import hardware_from
from myriad.planner.layout import Batch, Layout, ModelShape, PlanInput
from myriad.planner import step_time as step_time_module
from myriad.planner.step_time import ENGINES, MEGATRON_LM, MYRIAD, EngineTraits, step_time

A100 = GEMM_MODELS["a100"]
PEAK, HBM = 312e12, 2.039e12


def rate(m, n, k, batch=1):
    return 2.0 * m * n * k * batch / gemm_seconds(A100, m, n, k, PEAK, HBM, batch)


def test_a_large_square_gemm_runs_near_the_measured_best_shape_rate():
    assert 0.9 * A100.best * PEAK < rate(8192, 8192, 8192) <= A100.best * PEAK


def test_one_tile_more_than_a_wave_costs_a_second_wave():
    # 12 x 9 = 108 tiles of 128 x 128 fill one wave of the A100's SMs; one more column of outputs needs 120
    # tiles, a second wave.
    g = dataclasses.replace(A100, tiles=((128, 128),))
    assert g.sms == 12 * 9
    one = gemm_seconds(g, 12 * 128, 9 * 128, 8192, PEAK, HBM)
    two = gemm_seconds(g, 12 * 128, 9 * 128 + 1, 8192, PEAK, HBM)
    wave = 2.0 * 128 * 128 * (8192 + g.k_fill) / (PEAK * g.best / g.sms * g.tile_efficiency(128, 128, PEAK * g.best, 2))
    assert one == pytest.approx(wave + g.launch_s, rel=1e-12)
    assert two == pytest.approx(2 * wave + g.launch_s, rel=1e-12)


def test_a_thin_gemm_is_bound_by_hbm():
    m, n, k = 65536, 4096, 8  # 8 reduction steps: its operands and result dominate
    floor = (m * k + k * n + m * n) * 2 / (HBM * A100.hbm_fraction)
    assert gemm_seconds(A100, m, n, k, PEAK, HBM) == pytest.approx(floor + A100.launch_s, rel=1e-12)


def test_thin_tensor_parallel_shards_run_below_the_whole_gemms_rate():
    # GPT-3 175B's qkv GEMM (2048 tokens x 3h x h) whole and as one of 8 column shards, and a 1.7B-size one.
    whole = rate(2048, 3 * 12288, 12288)
    shard = rate(2048, 3 * 12288 // 8, 12288)
    small = rate(2048, 3 * 2304 // 8, 2304)
    assert small < shard < whole
    assert small < 0.8 * whole


def test_flash_attention_takes_longer_backward_and_scales_with_visible_keys():
    fwd = flash_seconds(A100, 8, 32, 2048, 128, 1024.0, PEAK)
    bwd = flash_seconds(A100, 8, 32, 2048, 128, 1024.0, PEAK, backward=True)
    assert bwd > 2.5 * fwd * 0.99
    longer = flash_seconds(A100, 8, 32, 2048, 128, 2048.0, PEAK)
    assert 1.8 * fwd < longer < 2.0 * fwd


def gpt(layers=24, hidden=2048, heads=16, seq=2048, vocab=51200):
    return ModelShape(family="gpt2", vocab_size=vocab, n_layer=layers, n_head=heads, n_kv_head=heads, n_embd=hidden,
                      context_length=seq, ffn_hidden=4 * hidden, tie_embeddings=True, bias=True,
                      padded_vocab=math.ceil(vocab / 1024) * 1024, head_dim=hidden // heads)


def inp(model, **layout):
    lay = Layout(**layout)
    global_batch = lay.micro_batch * lay.gradient_accumulation * lay.dp
    return PlanInput(model=model, layout=lay, batch=Batch(seq_len=model.context_length, global_batch=global_batch,
                                                          precision="bf16", device="cuda"))


def test_materialized_attention_computes_every_score_and_flash_only_the_visible_ones():
    hw = hardware_from("a100", 8, "nvlink3", "ib200")
    run = inp(gpt(), micro_batch=4)
    materialized = step_time(run, hw, MEGATRON_LM)
    flash = step_time(run, hw, dataclasses.replace(MEGATRON_LM, attention="flash", dropout=False))
    assert materialized.compute_by_class_s["attention"] > 1.5 * flash.compute_by_class_s["attention"]
    assert materialized.compute_by_class_s["matmul"] == flash.compute_by_class_s["matmul"]


def test_an_unknown_attention_kind_is_refused():
    with pytest.raises(ValueError, match="materialized"):
        EngineTraits(attention="paged")


def test_dp_traffic_hides_behind_compute_only():
    # ZeRO-3 over 64 nodes on a slow network: more dp traffic than compute; whatever is hidden must fit
    # in the compute (tp all-reduces on the path hide nothing).
    hw = hardware_from("a100", 8, "nvlink3", "roce200")
    st = step_time(inp(gpt(layers=16, hidden=4096, heads=32), tp=8, dp=64, zero_stage=3, micro_batch=1,
                       gradient_accumulation=2), hw, MYRIAD)
    assert st.comm_s["dp"] > st.compute_s
    assert st.comm_s["dp"] - st.exposed_comm_s["dp"] <= st.compute_s * (1 + 1e-9)


def test_an_engine_that_reduces_after_the_backward_exposes_all_of_it():
    hw = hardware_from("a100", 8, "nvlink3", "ib200")
    run = inp(gpt(), tp=2, dp=16, zero_stage=0, micro_batch=2, gradient_accumulation=4)
    after = step_time(run, hw, MEGATRON_LM)
    overlapped = step_time(run, hw, dataclasses.replace(MEGATRON_LM, dp_overlap=True))
    assert after.exposed_comm_s["dp"] == pytest.approx(after.comm_s["dp"], rel=1e-12)
    assert overlapped.exposed_comm_s["dp"] < after.exposed_comm_s["dp"]


def test_published_rows_convert_their_figures_with_their_convention():
    run = {"name": "hand", "source": "-", "quote": "-", "gpu": "a100", "gpus": 64, "engine": "megatron-lm",
           "model": {"layers": 24, "hidden": 2048, "heads": 16, "vocab": 51200, "seq_len": 2048},
           "layout": {"tp": 2, "pp": 2, "micro_batch": 2, "global_batch": 512, "recompute": "full"},
           "measured": {"kind": "tflops_per_gpu", "value": 100.0, "convention": "megatron"}}
    run_inp = validation.plan_input(run)
    assert run_inp.layout.dp == 16 and run_inp.layout.gradient_accumulation == 16
    B, s, L, h, V = 512, 2048, 24, 2048, 51200
    flops = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    assert validation.measured_step_s(run, run_inp) == pytest.approx(flops / (64 * 100e12), rel=1e-12)
    mfu = dict(run, measured={"kind": "mfu", "value": 0.5, "convention": "megatron"})
    assert validation.measured_step_s(mfu, run_inp) == pytest.approx(flops / (64 * 0.5 * 312e12), rel=1e-12)
    rows = validation.validate([run])
    hw = hardware_from("a100", 8, "", "ib200")
    assert rows[0].predicted_s == step_time(run_inp, hw, ENGINES["megatron-lm"]).total_s
    assert "median |error|" in validation.table(rows)


def test_every_published_row_is_costed():
    rows = validation.validate()
    assert len(rows) >= 8
    for row in rows:
        assert row.run["source"] and row.run["quote"], row.name
        assert row.measured_s > 0 and row.predicted_s > 0, row.name


def test_megatron_core_runs_its_tp_gemms_in_transformer_engines_userbuffer_pieces():
    # GPT-3 175B's block at tp 4 with sequence parallelism, one 2048-token micro-batch, on an H100. NeMo's
    # userbuffers split (tp_overlap_configs/userbuffers.py): qkv / fc1 forward in a ring of t = 4 pieces,
    # proj / fc2 forward pipelined in 4, proj / fc2 data gradients in rings of t, and qkv / fc1 data and
    # weight gradients whole (bulk overlap). Hand sums of the shape model's GEMM times.
    model = gpt(layers=8, hidden=12288, heads=96, seq=2048, vocab=50257)
    hw = hardware_from("h100", 8, "nvlink4", "ib400")
    engine = ENGINES["megatron-core"]
    assert engine.tp_rings and engine.tp_bulk_column_backward and engine.tp_row_forward_splits == 4
    mdl = step_time_module._Model(inp(model, tp=4, sequence_parallel=True, micro_batch=1), hw, engine, None)
    gemms = mdl.block_gemms(0)  # qkv, proj, fc, out: (m, n, k, batch)
    g = mdl._gemm_s

    def split(pieces, m, n, k, b):
        return pieces * g(m / pieces, n, k, b)

    def data_gradient(m, n, k, b):  # dX = dY W: (m x k) from (m x n)(n x k)
        return m, k, n, b

    forward = sum(split(4, *gemm) for gemm in gemms)
    data = (split(4, *data_gradient(*gemms[1])) + split(4, *data_gradient(*gemms[3]))
            + g(*data_gradient(*gemms[0])) + g(*data_gradient(*gemms[2])))
    weight = sum(g(k, n, m, b) for m, n, k, b in gemms)
    fwd, bwd = mdl.layer_pass(0)
    assert fwd.compute["matmul"] == pytest.approx(forward, rel=1e-12)
    assert bwd.compute["matmul"] == pytest.approx(data + weight, rel=1e-12)
    # The pieces cost more than the whole GEMMs (smaller tiles, fuller last waves): what the recipes pay.
    assert forward > sum(g(*gemm) for gemm in gemms)
    # Without sequence parallelism Transformer Engine's userbuffers do not run: every GEMM whole.
    plain = step_time_module._Model(inp(model, tp=4, micro_batch=1), hw, engine, None)
    assert plain.tp_blocked_gemms(False) == (set(), set())


def test_a_rows_engine_overrides_change_its_traits_and_unknown_ones_are_refused():
    # The 405B recipe's ring aggregation: t / 2 GEMMs per ring (bigger pieces, less quantisation loss).
    run = next(r for r in validation.load() if r.get("engine_overrides"))
    assert run["engine_overrides"] == {"tp_ring_aggregate": 2}
    assert validation.engine_traits(run).tp_ring_aggregate == 2
    assert validation.engine_label(run) == "megatron-core, tp_ring_aggregate=2"
    plain = {k: v for k, v in run.items() if k != "engine_overrides"}
    aggregated, whole = validation.validate([run])[0], validation.validate([plain])[0]
    assert aggregated.st.compute_s < whole.st.compute_s  # 4 pieces of 1/4 the rows beat 8 of 1/8
    with pytest.raises(ValueError, match="engine_overrides.ring_size is not an EngineTraits field"):
        validation.engine_traits({**run, "engine_overrides": {"ring_size": 2}})


def test_a_published_block_states_its_parts_and_bad_parts_are_refused():
    # Nemotron-4's block: LayerNorm, RoPE, a two-matrix MLP, no biases (a GPT row with two parts named).
    row = {"family": "gpt2", "positions": "rope", "bias": False, "layers": 2, "hidden": 256, "heads": 4,
           "vocab": 1000, "seq_len": 128}
    shape = validation.model_shape(row, 1)
    assert shape.layernorm and not shape.swiglu and not shape.learned_positions and not shape.bias
    assert shape.mlp_matrices == 2
    named = validation.model_shape({**row, "positions": "learned", "bias": True}, 1)  # GPT's parts, named
    default = validation.model_shape({k: v for k, v in row.items() if k not in ("positions", "bias")}, 1)
    hw = hardware_from("h100", 8, "nvlink4", "ib400")
    times = [step_time(PlanInput(model=m, layout=Layout(micro_batch=1), batch=Batch(seq_len=128, global_batch=1,
                                                                                    precision="bf16", device="cuda")),
                       hw, MYRIAD).total_s for m in (named, default, shape)]
    assert times[0] == times[1] != times[2]  # naming the family's parts changes nothing; RoPE does
    with pytest.raises(ValueError, match="model.mlp 'geglu' is not one of two_matrix, swiglu"):
        validation.model_shape({**row, "mlp": "geglu"}, 1)


def test_transfers_on_the_same_link_share_it(monkeypatch):
    # cp 2 x dp 4 with 8k tokens, one GPU per node: the cp ring and the dp buckets both use the node's
    # NIC; the ring's hidden transfers take the time the buckets would have hidden behind.
    run = inp(gpt(layers=8, hidden=2048, heads=16, seq=8192), cp=2, dp=4, zero_stage=1, micro_batch=1)
    hw = hardware_from("h100", 1, "nvlink4", "ib400")
    shared = step_time(run, hw, ENGINES["megatron-core"])
    monkeypatch.setattr(step_time_module._Model, "_room", lambda self, cost: cost.compute_seconds)
    alone = step_time(run, hw, ENGINES["megatron-core"])
    hidden_cp = shared.comm_s["cp"] - shared.exposed_comm_s["cp"]
    assert hidden_cp > 0 and shared.comm_s["dp"] == alone.comm_s["dp"]
    assert shared.exposed_comm_s["dp"] - alone.exposed_comm_s["dp"] > 0.5 * hidden_cp


def test_a_pcie_server_all_reduces_tp_slower_than_nvlink():
    run = inp(gpt(), tp=8, micro_batch=4)
    nvlink = step_time(run, hardware_from("a100", 8, "nvlink3", "ib200"), ENGINES["megatron-lm"])
    pcie = step_time(run, hardware_from("a100", 8, "pcie4", "ib200"), ENGINES["megatron-lm"])
    assert hardware_from("a100", 8, "pcie4").intra.bytes_per_s == pytest.approx(25e9)
    # the same bytes at 25 instead of 240 GB/s (and 5.7 instead of 3.4 us a step)
    assert pcie.exposed_comm_s["tp"] > 8 * nvlink.exposed_comm_s["tp"]
    assert pcie.compute_s == nvlink.compute_s


def test_the_gemm_model_is_checked_against_a_profiles_measured_shapes(tmp_path, capsys):
    import json
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({
        "schema": "myriad.machine_profile/1", "machine": "test", "date": "2026-12-05T00:00:00Z",
        "command": "bench_gemm_gpu --profile", "compute": {"matmul_flops_per_s": 6e14, "gemm_sizes": [
            {"m": 2048, "n": 4608, "k": 12288, "flops_per_s": 6.0e14},
            {"m": 2048, "n": 2048, "k": 128, "flops_per_s": 2.0e14}]}}))
    rows = validation.gemm_rows(str(profile), "h200")
    model = 2.0 * 2048 * 4608 * 12288 / gemm_seconds(GEMM_MODELS["h200"], 2048, 4608, 12288, 989.5e12, 4.8e12)
    assert rows[0] == (2048, 4608, 12288, 6.0e14, pytest.approx(model, rel=1e-12))
    assert validation.main(["--gemm-profile", str(profile), "--gpu", "h200"]) == 0
    assert "median |error|" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no compute.gemm_sizes"):
        validation.gemm_rows({"schema": "myriad.machine_profile/1", "machine": "m", "date": "d", "command": "c",
                              "compute": {"matmul_flops_per_s": 1.0}}, "h100")


def test_the_docs_show_the_validation_table_the_model_gives_today():
    # docs/planning.md's "Validation against published runs" table is this command's output: a change to
    # the model that moves a row must update the docs (python -m myriad.planner.validation).
    from package_under_test import REPO
    with open(f"{REPO}/docs/planning.md", encoding="utf-8") as f:
        docs = f.read()
    text = validation.table(validation.validate())
    assert text in docs, "docs/planning.md's validation table differs from `python -m myriad.planner.validation`"
