"""myriad.operations.goodput: the analytical model and the event simulator agree in expectation (each part of the
wall time, within 4 standard errors over a few hundred seeded runs), the simulator's best interval lands near
Daly's where Daly is accurate (delta << M), Young's and Daly's formulas give the published numbers, the limiting
cases are exact (no failures: goodput = tau / (tau + delta); an interval longer than the job = one segment), bad
inputs name the argument, and the command prints the table for 1k, 4k, 10k and 16k GPUs.

Seeds are fixed, so every run of this file computes the same numbers; the tolerances are sized so that a correct
simulator would fail them for about 1 seed set in 10,000 (4 sigma), while the mistakes they guard against
(failures during recovery forgotten, a failed save kept, a lost interval not counted) move the means by far more.
"""
import dataclasses
import json
import math

import pytest

from myriad.operations import goodput as gp


def assert_within(sim_values, expected, sigmas=4.0, what=""):
    """The mean of sim_values is within `sigmas` standard errors of `expected` (CLT over independent runs)."""
    n = len(sim_values)
    mean = sum(sim_values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in sim_values) / (n - 1))
    se = sd / math.sqrt(n)
    assert abs(mean - expected) <= sigmas * se + 1e-9 * abs(expected), \
        f"{what}: simulated mean {mean:.6g} vs model {expected:.6g} (standard error {se:.3g})"


# A small, harsh job so that a few hundred runs hold thousands of failures and the file stays fast: system MTBF
# 1 h, recovery 10 min (so e^(R/M) - 1 = 18 % extra failures during recovery: forgetting them is ~6 sigma off).
HARSH = gp.GoodputInputs(gpus=4, mtbf_hours=4.0, detect_s=60.0, restart_s=400.0, save_s=30.0, load_s=140.0,
                         interval_s=600.0, job_hours=20.0)


@pytest.mark.parametrize("interval_s", [600.0, 3600.0])  # tau = M/6 and tau = M (most segments fail at least once)
def test_model_matches_simulator_in_expectation(interval_s):
    inputs = HARSH.with_interval(interval_s)
    model = gp.expected(inputs)
    runs = gp.simulate_seeds(inputs, range(400)).runs
    assert_within([r.wall_s for r in runs], model.wall_s, what="wall time")
    assert_within([r.lost_s for r in runs], model.lost_s, what="lost work")
    assert_within([r.recovery_s for r in runs], model.recovery_s, what="recovery time")
    assert_within([r.failures for r in runs], model.failures, what="failures")
    # Completed saves are not random: one per segment.
    assert all(r.save_s == pytest.approx(model.save_s) for r in runs)
    # Every run's wall time is exactly useful + saves + lost + recovery.
    for r in runs:
        assert r.wall_s == pytest.approx(r.useful_s + r.save_s + r.lost_s + r.recovery_s, rel=1e-12)
    # The waste per failure: recovery R plus about half a segment lost (exactly: M - s / (e^(s/M) - 1) per
    # failed segment, recovery repeated after failures during it).
    total = gp.simulate_seeds(inputs, range(400))
    assert total.waste_per_failure_s == pytest.approx(model.waste_per_failure_s, rel=0.03)


def test_waste_per_failure_is_recovery_plus_half_a_segment_to_first_order():
    # R, s << M: each failure costs the recovery and on average half the segment (work + save) it struck.
    mild = gp.GoodputInputs(gpus=1, mtbf_hours=100.0, detect_s=10.0, restart_s=40.0, save_s=30.0, load_s=10.0,
                            interval_s=600.0, job_hours=1000.0)
    assert gp.expected(mild).waste_per_failure_s == pytest.approx(60.0 + (600.0 + 30.0) / 2, rel=0.002)
    # At R = M/6 (HARSH) the first-order figure is 11 % too high: failures during recovery waste only part of R.
    harsh = gp.expected(HARSH)
    assert harsh.waste_per_failure_s < 0.92 * (HARSH.recovery_s + (HARSH.interval_s + HARSH.save_s) / 2)


def test_failures_form_a_poisson_process_in_wall_time():
    # The model's failures over the job = wall / M: failures strike at rate 1/M at every moment.
    model = gp.expected(HARSH)
    assert model.failures == pytest.approx(model.wall_s / HARSH.system_mtbf_s, rel=1e-12)


def test_young_and_daly_give_the_published_numbers():
    # Daly (2006), figures 3-5: delta = 5 min, M = 24 h, 6 h, 15 min → tau_opt = 117, 57 and 9.1 min.
    assert gp.daly_interval(5, 24 * 60) == pytest.approx(117, abs=0.5)
    assert gp.daly_interval(5, 6 * 60) == pytest.approx(57, abs=0.5)
    assert gp.daly_interval(5, 15) == pytest.approx(9.1, abs=0.05)
    assert gp.young_interval(5, 24 * 60) == pytest.approx(120)
    assert gp.daly_interval(50, 20) == 20  # delta >= 2M: checkpoint every M
    for ratio in (1e-4, 1e-2, 0.1, 0.5, 1.9):  # Daly below Young for every delta < 2M
        assert gp.daly_interval(ratio, 1.0) < gp.young_interval(ratio, 1.0)


@pytest.mark.parametrize("ratio", [1e-4, 1e-3, 1e-2, 0.1])
def test_daly_approximates_the_exact_optimum_better_than_young(ratio):
    mtbf = 3600.0
    exact = gp.exact_interval(ratio * mtbf, mtbf)
    daly, young = gp.daly_interval(ratio * mtbf, mtbf), gp.young_interval(ratio * mtbf, mtbf)
    assert abs(daly - exact) < abs(young - exact)
    assert daly == pytest.approx(exact, rel=1e-3)
    # The exact optimum does minimise the long-job overhead (e^((tau + delta)/M) - 1) / tau.
    cost = lambda tau: math.expm1((tau + ratio * mtbf) / mtbf) / tau  # noqa: E731
    assert cost(exact) <= min(cost(exact * 0.99), cost(exact * 1.01))


def test_model_search_finds_the_exact_optimum_on_a_long_job():
    inputs = gp.GoodputInputs(gpus=16384, job_hours=2000.0)
    exact = gp.exact_interval(inputs.save_s, inputs.system_mtbf_s)
    assert gp.best_interval_model(inputs) == pytest.approx(exact, rel=0.01)


def test_simulator_best_interval_is_near_daly_where_daly_is_accurate():
    # delta / M = 0.01: Daly is within 0.1 % of the exact optimum. Near the optimum the overhead grows like
    # sqrt(delta / 2M) eps^2 (1.6e-3 of the wall time at eps = 15 %), while the simulated means over ~20,000
    # failures differ by noise of about a quarter of that: a candidate 15 % off wins only by a ~4 sigma fluke.
    inputs = gp.GoodputInputs(gpus=1, mtbf_hours=1.0, detect_s=20.0, restart_s=30.0, save_s=36.0, load_s=10.0,
                              job_hours=200.0)
    daly = gp.daly_interval(inputs.save_s, inputs.system_mtbf_s)
    best, curve = gp.best_interval_sim(inputs, seeds=20, min_failures=20000)
    assert best == pytest.approx(daly, rel=0.15)
    # The curve has a real minimum: both ends of the scanned range are clearly worse.
    walls = [s.wall_s for _, s in curve]
    assert min(walls) < 0.97 * walls[0] and min(walls) < 0.97 * walls[-1]


def test_no_failures_goodput_is_interval_over_interval_plus_save():
    inputs = gp.GoodputInputs(gpus=16384, mtbf_hours=math.inf, save_s=5.0, interval_s=600.0, job_hours=10.0)
    assert gp.expected(inputs).goodput == pytest.approx(600 / 605, rel=1e-12)
    run = gp.simulate(inputs, 0)
    assert (run.failures, run.lost_s, run.recovery_s) == (0, 0.0, 0.0)
    assert run.goodput == pytest.approx(600 / 605, rel=1e-12)
    assert run.wall_s == pytest.approx(60 * 605, rel=1e-12)
    # A finite but huge MTBF is the same limit.
    huge = dataclasses.replace(inputs, mtbf_hours=1e15)
    assert gp.expected(huge).goodput == pytest.approx(600 / 605, rel=1e-9)
    assert gp.simulate(huge, 1).goodput == pytest.approx(600 / 605, rel=1e-12)
    # A remainder segment also ends with a save: 10 h of work in 700 s intervals = 52 segments.
    odd = inputs.with_interval(700.0)
    assert gp.expected(odd).wall_s == pytest.approx(36000 + 52 * 5.0)
    assert gp.simulate(odd, 0).wall_s == pytest.approx(36000 + 52 * 5.0)


def test_interval_longer_than_the_job_is_one_segment():
    inputs = HARSH.with_interval(HARSH.work_s * 3)
    once = gp.expected(inputs)
    assert once == dataclasses.replace(gp.expected(HARSH.with_interval(HARSH.work_s)), interval_s=inputs.interval())
    assert once.save_s == HARSH.save_s
    lam, s = HARSH.failure_rate, HARSH.work_s + HARSH.save_s
    assert once.wall_s == pytest.approx(math.exp(lam * HARSH.recovery_s) * math.expm1(lam * s) / lam, rel=1e-12)
    # Without failures: the work and one save.
    calm = dataclasses.replace(inputs, mtbf_hours=math.inf)
    assert gp.simulate(calm, 0).wall_s == pytest.approx(HARSH.work_s + HARSH.save_s)
    # With them (a 20 h segment at M = 1 h restarts ~e^20 times): the simulator agrees on a milder job.
    mild = dataclasses.replace(inputs, job_hours=1.0)
    assert_within([r.wall_s for r in gp.simulate_seeds(mild, range(300)).runs], gp.expected(mild).wall_s,
                  what="one segment")


def test_interval_rounds_to_whole_steps():
    inputs = gp.GoodputInputs(step_s=7.0, interval_s=100.0)
    assert inputs.interval() == 98.0
    assert inputs.with_interval(2.0).interval() == 7.0  # at least one step
    assert gp.GoodputInputs(step_s=7.0).interval() % 7.0 == 0
    assert gp.best_interval_model(dataclasses.replace(inputs, interval_s=None)) % 7.0 == 0
    # A free save: save every step.
    assert gp.best_interval_model(gp.GoodputInputs(save_s=0.0, step_s=5.0, job_hours=24.0)) == 5.0


@pytest.mark.parametrize("field, value", [
    ("gpus", 0), ("gpus", -8), ("gpus", 2.5), ("gpus", True), ("mtbf_hours", 0.0), ("mtbf_hours", float("nan")),
    ("detect_s", -1.0), ("restart_s", -0.5), ("save_s", -1e-3), ("load_s", float("inf")), ("interval_s", 0.0),
    ("job_hours", -3.0), ("step_s", 0.0),
])
def test_bad_inputs_name_the_argument(field, value):
    with pytest.raises(ValueError, match=field):
        gp.GoodputInputs(**{field: value})


def test_stall_scaling_helpers():
    # bench_checkpoint's model: 124.5M parameters x 12 bytes = 1.39 GiB; scaling it to itself gives the measurement.
    assert gp.checkpoint_bytes_per_rank(124.5e6) / 2**30 == pytest.approx(1.39, abs=0.005)
    assert gp.scale_stall(gp.BENCH_STATE_BYTES) == pytest.approx(gp.BENCH_SYNC_SAVE_S)
    # 70B parameters over 64 shards: 13.1 GB a rank, ~8.8x the bench's state.
    per_rank = gp.checkpoint_bytes_per_rank(70e9, shards=64)
    assert gp.scale_stall(per_rank, gp.BENCH_ASYNC_STALL_S) == pytest.approx(0.20 * per_rank / 1.494e9)
    with pytest.raises(ValueError, match="shards"):
        gp.checkpoint_bytes_per_rank(1e9, shards=0)
    with pytest.raises(ValueError, match="bytes_per_rank"):
        gp.scale_stall(-1)


def test_table_rows_get_worse_with_more_gpus():
    base = gp.GoodputInputs(job_hours=48.0)
    rows = gp.goodput_table(base=base, seeds=4, min_failures=400)
    assert [r.gpus for r in rows] == [1024, 4096, 10240, 16384]
    for a, b in zip(rows, rows[1:]):
        assert b.system_mtbf_h == pytest.approx(a.system_mtbf_h * a.gpus / b.gpus)
        assert b.goodput_daly < a.goodput_daly and b.daly_s < a.daly_s and b.failures > a.failures
    for r in rows:
        assert r.daly_s < r.young_s
        assert r.goodput_best_model >= max(r.goodput_young, r.goodput_daly) - 1e-12
        assert 0 < r.goodput_best_sim < 1


def test_cli_prints_the_four_cluster_sizes(capsys, tmp_path):
    out_json = tmp_path / "goodput.json"
    assert gp.main(["--job-hours", "48", "--seeds", "3", "--min-failures", "300", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 4, out
    assert "Young" in table[0] and "Daly" in table[0] and "best (sim)" in table[0]
    assert [line.split("|")[1].strip() for line in table[2:]] == ["1024", "4096", "10240", "16384"]
    data = json.loads(out_json.read_text())
    assert [row["gpus"] for row in data["rows"]] == [1024, 4096, 10240, 16384]
    assert data["inputs"]["save_s"] == gp.BENCH_SYNC_SAVE_S and data["inputs"]["gpus"] == [1024, 4096, 10240, 16384]


def test_cli_scales_the_save_from_the_state_size(capsys, tmp_path):
    out_json = tmp_path / "g.json"
    gp.main(["--gpus", "2048", "--state-gib", "2.78", "--async-save", "--job-hours", "24", "--seeds", "2",
             "--min-failures", "100", "--json", str(out_json)])
    inputs = json.loads(out_json.read_text())["inputs"]
    assert inputs["save_s"] == pytest.approx(0.20 * 2.78 / 1.3914, rel=1e-3)  # twice the bench's state
    assert inputs["load_s"] == pytest.approx(5.57 * 2.78 / 1.3914, rel=1e-3)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")][2:]
    assert [line.split("|")[1].strip() for line in rows] == ["2048"]


@pytest.mark.parametrize("argv, word", [(["--gpus", "0"], "--gpus"), (["--save-s", "-1"], "save_s"),
                                        (["--save-s", "0"], "step_s"), (["--mtbf-hours", "0"], "mtbf_hours")])
def test_cli_rejects_bad_inputs(argv, word, capsys):
    with pytest.raises(SystemExit) as exit_info:
        gp.main(argv + ["--job-hours", "1", "--seeds", "1", "--min-failures", "1"])
    assert exit_info.value.code == 2
    assert word in capsys.readouterr().err


def test_cli_plot(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "goodput.png"
    gp.main(["--gpus", "4096,16384", "--job-hours", "24", "--seeds", "2", "--min-failures", "200", "--plot", str(png)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
