"""`myriad plan` as users call it: the search finds layouts that fit and writes a config the engine
accepts; the config's own layout is evaluated with a dry run that equals the planner; a model too
big for the cluster says so with the smallest footprints; bad requests are refused naming the
option; the `myriad` command dispatches to every planning tool."""
import os
import re

import pytest
import yaml

import myriad
from myriad import cli
from myriad.planner import plan as planner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT3 = os.path.join(ROOT, "configs", "gpt3_175b.yaml")
MOE = os.path.join(ROOT, "configs", "moe_1t.yaml")


def test_search_finds_fitting_layouts_and_writes_a_config_the_engine_accepts(tmp_path, capsys):
    out = tmp_path / "plan.yaml"
    code = cli.main(["plan", "--config", GPT3, "--gpus", "1024", "--gpu", "h100", "--top", "3", "--yaml", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "tok/s" in text and "binding" in text
    config = myriad.Config.from_file(str(out))
    config.validate(1024)  # ready to run: the engine's own checks pass for 1024 ranks
    values = yaml.safe_load(out.read_text())
    p = values["parallel"]
    assert p["tp"] * p["pp"] * p["cp"] * p["dp"] == 1024
    assert values["training"]["global_batch_size"] == 1536  # the batch is the config's, not the search's


def test_search_results_are_ranked_and_fit_on_every_rank_role():
    # A part of the space (the whole one is searched by the test above): tp 4 and 8 over pp 8 and 16,
    # interleaved or not, ZeRO 1, recompute none or selective — 380 layouts, 36 of them refused.
    space = {"tp": [4, 8], "pp": [8, 16], "zero_stage": [1], "recompute": ["none", "selective"]}
    result = planner.plan(GPT3, 1024, gpu="h100", top=4, space=space)
    assert result.best, planner.format_table(result)
    speeds = [c.step.tokens_per_s for c in result.best]
    assert speeds == sorted(speeds, reverse=True)
    for c in result.best:
        assert c.memory_bytes <= result.usable_bytes
        assert c.step.total_s > 0 and 0 < c.step.mfu < 1
    assert result.refused  # e.g. interleaved layouts whose micro-batch count pp does not divide: counted
    text = planner.format_table(result)
    for reason, _ in sorted(result.refused.items(), key=lambda kv: -kv[1])[:8]:
        # the engine's whole message (numbers folded to N), as the table prints it: never cut mid-word
        assert reason.rstrip()[-1] in ".)'\"" and f": {reason}" in text, reason


def test_the_configs_own_layout_with_a_dry_run_that_equals_the_planner(capsys):
    code = cli.main(["plan", "--config", MOE, "--gpus", "2048", "--no-search", "--dry-run"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "NO:" not in text
    assert text.count(" yes") >= 2048  # every role: pp 16 x ep 64 x the first and last dp index


def test_a_model_too_big_for_the_cluster_shows_the_smallest_footprints(capsys):
    code = cli.main(["plan", "--config", GPT3, "--gpus", "8", "--gpu", "a100"])
    text = capsys.readouterr().out
    assert code == 1
    assert "NOTHING FITS" in text and "memory (" in text


def test_bad_requests_name_the_option(capsys):
    assert cli.main(["plan", "--config", GPT3, "--gpus", "1024", "--gpu", "tpu"]) == 2
    assert "unknown gpu 'tpu'" in capsys.readouterr().err
    assert cli.main(["plan", "--config", GPT3, "--gpus", "1000", "--no-search"]) == 2
    assert "parallel" in capsys.readouterr().err  # 8 x 16 x 8 is not 1000 ranks
    assert cli.main(["plan", "--config", os.path.join(ROOT, "configs"), "--gpus", "8"]) == 2
    capsys.readouterr()
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_a_world_with_no_layout_says_why_and_bad_node_sizes_are_refused(capsys):
    assert cli.main(["plan", "--config", GPT3, "--gpus", "7"]) == 1
    text = capsys.readouterr().out
    assert "no layout of this model fits the world size (the reasons below)" in text
    assert "dp = 7 GPUs / (tp x pp x cp) does not divide the global batch of 1536 sequences" in text, text
    for bad in ("-8", "0"):
        assert cli.main(["plan", "--config", GPT3, "--gpus", "1024", "--gpus-per-node", bad]) == 2
        assert f"--gpus-per-node must be >= 1, got {bad}" in capsys.readouterr().err
    with pytest.raises(ValueError, match="gpus_per_node must be an integer >= 1"):
        planner.plan(GPT3, 1024, gpus_per_node=-8)


def test_explain_costs_one_layout_and_breaks_its_step_down(capsys):
    layout = "tp4 pp16 dp16 mb1x96 z1 sp rc-selective"
    code = cli.main(["plan", "--config", GPT3, "--gpus", "1024", "--explain", layout])
    text = capsys.readouterr().out
    assert code == 0, text
    line = next(x for x in text.splitlines() if x.startswith(f"{layout}: step "))
    total, compute, exposed, bubble, optimizer = (float(v) for v in re.search(
        r"step (\S+) s = compute (\S+) s \+ exposed communication (\S+) s .* \+ bubble (\S+) s \+ optimizer (\S+) s",
        line).groups())
    assert total == pytest.approx(compute + exposed + bubble + optimizer, rel=1e-2)  # 3 significant digits each
    assert "compute by op class: matmul" in text and "recompute's share" in text
    assert "communication per axis, issued / exposed: tp " in text
    assert cli.main(["plan", "--config", GPT3, "--gpus", "1024", "--explain", "tp4 pq16"]) == 2
    assert "'pq16' is not a layout word" in capsys.readouterr().err


def test_a_published_systems_traits_cost_the_same_layout_differently(capsys):
    layout = "tp8 pp16 dp8 mb1x192 z1 rc-full"
    steps, attention, tp_exposed, pp_issued = {}, {}, {}, {}
    for engine in ("myriad", "megatron-lm", "megatron-core"):
        assert cli.main(["plan", "--config", GPT3, "--gpus", "1024", "--gpu", "a100", "--inter", "ib200",
                         "--engine", engine, "--explain", layout]) == 0
        text = capsys.readouterr().out
        steps[engine] = float(re.search(rf"{layout}: step (\S+) s", text).group(1))
        attention[engine] = float(re.search(r"attention (\S+) s", text).group(1))
        tp_exposed[engine] = float(re.search(r"exposed communication \S+ s \(tp (\S+),", text).group(1))
        pp_issued[engine] = float(re.search(r"pp (\S+) / \S+ s", text).group(1))
    # Megatron-Core's flash attention with every exchange overlapped is the fastest; each trait shows where
    # it acts: myriad's 16-bit runs take fused (flash) attention where Megatron-LM materialises the scores,
    # its tp messages are f32 (Megatron's 16-bit), and each of its tp ranks sends the whole activation to the
    # next stage (Megatron: a 1/tp slice each, all-gathered over NVLink).
    assert steps["megatron-core"] < min(steps["myriad"], steps["megatron-lm"]) and len(set(steps.values())) == 3
    assert attention["myriad"] < attention["megatron-lm"]
    assert tp_exposed["myriad"] > tp_exposed["megatron-lm"]
    assert pp_issued["myriad"] > pp_issued["megatron-lm"]
    with pytest.raises(SystemExit) as stopped:
        cli.main(["plan", "--config", GPT3, "--gpus", "1024", "--engine", "deepspeed"])
    assert stopped.value.code == 2 and "invalid choice: 'deepspeed'" in capsys.readouterr().err


def test_layouts_left_out_before_the_engines_check_are_ones_it_refuses():
    from myriad.planner.layout import Layout, read_config

    base = read_config(MOE, 0)
    batch = base.batch.global_batch  # 4096 sequences
    common = dict(cp=1, ep=16, zero_stage=1, recompute="none")
    moe_tp = Layout(tp=2, pp=1, dp=512, virtual_stages=1, schedule="1f1b", sequence_parallel=True, micro_batch=1,
                    gradient_accumulation=batch // 512, **common)  # micro-batch 1 over tp 2
    interleaved = Layout(tp=1, pp=16, dp=64, virtual_stages=2, schedule="interleaved", sequence_parallel=False,
                         micro_batch=16, gradient_accumulation=4, **common)  # 4 micro-batches, pp 16
    parsed = myriad.Config.from_string(base.config_yaml)
    for layout, rule in ((moe_tp, planner.PRUNED_MOE_MICRO_BATCH), (interleaved, planner.PRUNED_INTERLEAVED)):
        refusal = planner._engine_refusal(parsed, planner.layout_overrides(layout, batch), 1024)
        assert refusal is not None, rule  # the engine refuses what the search leaves out
        skipped = {}
        space = {"tp": [layout.tp], "pp": [layout.pp], "cp": [1], "ep": [16], "virtual_stages": [layout.virtual_stages],
                 "micro_batch": [layout.micro_batch], "zero_stage": [1], "recompute": ["none"]}
        assert list(planner.enumerate_layouts(base, 1024, 8, space, skipped)) == []
        assert skipped == {rule: 1}


def test_the_myriad_command_dispatches_to_every_planning_tool(tmp_path, capsys):
    assert cli.main(["--help"]) == 0
    listing = capsys.readouterr().out
    for name in ("plan", "goodput", "sbatch", "cluster-sim"):
        assert name in listing
    assert cli.main(["goodput", "--gpus", "1024", "--seeds", "2"]) == 0
    assert "1024" in capsys.readouterr().out
    script = tmp_path / "job.sbatch"
    assert cli.main(["sbatch", "--config", GPT3, "--nodes", "128", "--gpus-per-node", "8", "--out", str(script)]) == 0
    assert "#SBATCH --nodes=128" in script.read_text()


@pytest.mark.parametrize("headroom", [-0.1, 1.0])
def test_headroom_outside_its_range_is_refused(headroom):
    with pytest.raises(ValueError, match="headroom"):
        planner.plan(GPT3, 1024, headroom=headroom)


def test_dp_exchanges_the_step_time_does_not_model_are_named(capsys):
    code = cli.main(["plan", "--config", GPT3, "--gpus", "1024", "--no-search", "--set", "training.device=cpu",
                     "--set", "training.precision=fp32", "--set", "parallel.zero_stage=0",
                     "--set", "training.gradient_compression=int8"])
    text = capsys.readouterr().out
    assert code in (0, 1)
    assert "not timed: training.gradient_compression int8" in text


def test_fp8_is_refused_with_the_reason_and_the_bf16_alternative(capsys):
    code = cli.main(["plan", "--config", GPT3, "--gpus", "1024", "--set", "training.precision=fp8"])
    err = capsys.readouterr().err
    assert code == 2
    assert "training.precision fp8 is not costed by the planner" in err
    assert "training.precision=bf16" in err
