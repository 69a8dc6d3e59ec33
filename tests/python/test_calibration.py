"""Calibration: the machine profile that bench_gemm --profile writes (it loads, it has the keys the
planner reads, a merge keeps the other benchmarks' keys), and benchmarks/planner_vs_scaling.py's
prediction on a fixed synthetic profile (no benchmark run: one table row per bench_scaling layout).
The one benchmark run is bench_gemm at tiny sizes (about 15 s on 2 cores); it is skipped when
build/benchmarks/bench_gemm is missing."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from package_under_test import REPO

from myriad.planner.hardware import hardware_from, load_profile

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import planner_vs_scaling as pvs  # noqa: E402

BENCH_GEMM = os.path.join(REPO, "build", "benchmarks", "bench_gemm")

SYNTHETIC = {
    "schema": "myriad.machine_profile/1", "machine": "synthetic 2-core host", "date": "2026-12-02T00:00:00Z",
    "command": "none (test)", "cores": 2, "threads": 1, "peak_flops_per_s": 2.0e11,
    "compute": {"matmul_flops_per_s": 1.4e11, "attention_flops_per_s": 4.0e10, "memory_bytes_per_s": 2.0e10,
                "activation_bytes_per_s": 7.0e8, "optimizer_bytes_per_s": 4.0e10},
    "links": {"intra": {"alpha_s": 3e-6, "beta_s_per_byte": 1.6e-10, "measured_with": "synthetic"}},
}

SCALING_TABLE = """| layout                     | step ms | tokens/s | comm share | bubble share | vs dp only |
|----------------------------|---------|----------|------------|--------------|------------|
| dp2 tp1 pp1                | 675     | 3034     | 0.5%       | 0.0%         | 100.0%     |
| dp1 tp1 pp2 interleaved v2 | 727     | 2817     | 2.7%       | 4.3%         | 92.9%      |
| dp1 tp2 pp1 +sp            | 682     | 3003     | 4.3%       | 0.0%         | 99.0%      |
| dp4 tp1 pp1                | 708     | 2893     | 4.0%       | 0.0%         | 100.0%     |
| dp1 tp1 pp4                | 700     | 2927     | 13.6%      | 18.4%        | 101.2%     |
| dp1 tp2 pp2                | 700     | 2924     | 34.7%      | 7.1%         | 101.1%     |
"""


@pytest.mark.skipif(not os.path.exists(BENCH_GEMM), reason="build/benchmarks/bench_gemm not built")
def test_bench_gemm_profile_loads_and_merges_into_other_benchmarks_keys(tmp_path):
    path = tmp_path / "profile.json"
    earlier = {"schema": "myriad.machine_profile/1", "machine": "m", "date": "d", "command": "c",
               "commands": {"bench_collectives": "bench_collectives --profile x"},
               "compute": {"attention_flops_per_s": 1.5e10},
               "links": {"intra": {"alpha_s": 1e-6, "beta_s_per_byte": 1e-10, "measured_with": "earlier run"}}}
    path.write_text(json.dumps(earlier))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([BENCH_GEMM, "--quick", "--tokens", "64", "--embd", "64", "--vocab", "128", "--stream-mib", "8",
                    "--profile", str(path)], check=True, env=env, capture_output=True, timeout=60)
    profile = load_profile(path)
    for key in ("peak_flops_per_s", "cores", "threads", "precision"):
        assert key in profile, key
    for key in ("matmul_flops_per_s", "memory_bytes_per_s", "activation_bytes_per_s", "optimizer_bytes_per_s",
                "gemm_sizes", "stream"):
        assert key in profile["compute"], key
    assert profile["threads"] == 1 and profile["cores"] >= 1
    # Merged: the other benchmarks' keys stay, the header names every writer's command.
    assert profile["compute"]["attention_flops_per_s"] == 1.5e10
    assert profile["links"]["intra"]["measured_with"] == "earlier run"
    assert "bench_collectives --profile x" in profile["command"] and "bench_gemm" in profile["command"]
    assert not list(tmp_path.glob("*.tmp.*")), "the temporary file was renamed away"
    hw = hardware_from("cpu_host", profile=path)
    assert hw.cores == profile["cores"] and hw.matmul.calibrated and hw.activation.calibrated


def test_time_sharing_gives_each_rank_its_share_of_the_cores():
    hw = hardware_from("cpu_host", profile=SYNTHETIC)
    assert hw.rank_share(1) == 1.0 and hw.rank_share(2) == 1.0
    assert hw.rank_share(4) == 0.5 and hw.rank_share(8) == 0.25


def test_planner_vs_scaling_predicts_one_row_per_layout():
    rows = pvs.parse_scaling(SCALING_TABLE)
    assert [r.ranks for r in rows] == [2, 2, 2, 4, 4, 4]
    assert rows[1].virtual_stages == 2 and rows[2].sp and rows[5].tp == 2 and rows[5].pp == 2
    results = pvs.predict(rows, SYNTHETIC)
    assert [r["layout"] for r in results] == [r.layout for r in rows]
    for r in results:
        assert r["predicted_s"] > 0 and r["ratio"] == pytest.approx(r["predicted_s"] / r["measured_s"])
        assert r["predicted_s"] <= r["plain_s"] + 1e-12  # idle ranks' cores go to working ones
    by = {r["layout"]: r for r in results}
    # Pure dp on 4 ranks sharing 2 cores does the same work per core as on 2 ranks.
    assert by["dp4 tp1 pp1"]["compute_s"] == pytest.approx(by["dp2 tp1 pp1"]["compute_s"], rel=1e-9)
    # With 2 ranks on 2 cores the pipeline's bubble stays; at 4 ranks on 2 cores other ranks fill it.
    assert by["dp1 tp1 pp2 interleaved v2"]["bubble_s"] > 0
    assert by["dp1 tp1 pp4"]["predicted_s"] < by["dp1 tp1 pp4"]["plain_s"]
    table = pvs.table(results)
    assert len([line for line in table.splitlines() if line.startswith("| dp")]) == len(rows)


def _link(alpha, beta, ranks, group):
    return {"alpha_s": alpha, "beta_s_per_byte": beta, "ranks": ranks, "group": group, "measured_with": "synthetic"}


SHARED = dict(SYNTHETIC, links=dict(SYNTHETIC["links"], intra_by_ranks={
    "2x2": _link(3e-6, 1.4e-10, 2, 2), "4x4": _link(8e-6, 3e-10, 4, 4),
    "8x2": _link(1e-5, 6e-10, 8, 2), "8x8": _link(1.4e-5, 9e-10, 8, 8)}))


def test_intra_link_is_the_one_measured_nearest_to_the_ranks_sharing_the_node():
    hw = hardware_from("cpu_host", profile=SHARED)
    beta = {key: entry["beta_s_per_byte"] for key, entry in SHARED["links"]["intra_by_ranks"].items()}
    assert hw.intra_link(8, 2).beta_s_per_byte == beta["8x2"]
    assert hw.intra_link(8, 8).beta_s_per_byte == beta["8x8"]
    assert hw.intra_link(8, 4).beta_s_per_byte == beta["8x8"]  # a tie in group size goes to the larger
    assert hw.intra_link(6, 2).beta_s_per_byte == beta["8x2"]  # nearest ranks first (log scale)
    assert hw.intra_link(3, 3).beta_s_per_byte == beta["4x4"]
    assert hw.intra_link(2, 2).beta_s_per_byte == beta["2x2"]
    assert "intra 8x2" in hw.calibration()
    # Without shared entries every group gets links.intra.
    plain = hardware_from("cpu_host", profile=SYNTHETIC)
    assert plain.intra_link(8, 2) is plain.intra


def test_step_time_times_each_group_on_the_link_of_its_ranks_on_the_node():
    from myriad.planner.step_time import Network
    hw = hardware_from("cpu_host", profile=SHARED)
    shared = SHARED["links"]["intra_by_ranks"]
    assert Network(hw, tp=2, cp=1, dp=4, pp=1, ep=1)._links("tp")[2].beta_s_per_byte == shared["8x2"]["beta_s_per_byte"]
    assert Network(hw, tp=1, cp=1, dp=8, pp=1, ep=1)._links("dp")[2].beta_s_per_byte == shared["8x8"]["beta_s_per_byte"]
    assert Network(hw, tp=2, cp=1, dp=1, pp=1, ep=1)._links("tp")[2].beta_s_per_byte == shared["2x2"]["beta_s_per_byte"]
    # The same 2-rank tp all-reduce is slower while 8 ranks share the node.
    alone = Network(hw, tp=2, cp=1, dp=1, pp=1, ep=1).all_reduce("tp", 1 << 20)
    crowded = Network(hw, tp=2, cp=1, dp=4, pp=1, ep=1).all_reduce("tp", 1 << 20)
    assert crowded > 3 * alone


def test_in_step_links_are_preferred_to_back_to_back_ones():
    from myriad.planner.step_time import Network
    profile = dict(SHARED, links=dict(SHARED["links"], intra_in_step_by_ranks={"8x2": _link(1e-4, 6e-10, 8, 2)}))
    hw = hardware_from("cpu_host", profile=profile)
    assert hw.intra_link(8, 2).alpha_s == 1e-4
    assert hw.intra_link(2, 2).alpha_s == 1e-4  # the in-step entries replace the back-to-back ones
    assert "intra in step 8x2" in hw.calibration() and "intra 8x2" in hw.calibration()
    nbytes = 1 << 20
    net = Network(hw, tp=2, cp=1, dp=4, pp=1, ep=1)
    assert net.all_reduce("tp", nbytes) == pytest.approx(2 * 1e-4 + nbytes * 6e-10)
    assert net.all_gather("tp", nbytes) == pytest.approx(1e-4 + nbytes / 2 * 6e-10)


def test_a_tp_split_runs_its_gemms_at_its_own_measured_rate():
    from myriad.planner.layout import read_config
    from myriad.planner.step_time import step_time
    slow = dict(SYNTHETIC, compute=dict(SYNTHETIC["compute"], matmul_flops_per_s_by_tp={"2": 0.7e11, "8": 0.35e11}))
    plain, split = hardware_from("cpu_host", profile=SYNTHETIC), hardware_from("cpu_host", profile=slow)
    assert split.matmul_flops_per_s("fp32", 1) == plain.matmul_flops_per_s("fp32")
    assert split.matmul_flops_per_s("fp32", 2) == 0.7e11 and split.matmul_flops_per_s("fp32", 3) == 0.7e11
    assert split.matmul_flops_per_s("fp32", 4) == 0.35e11  # a tie on the log scale goes to the larger tp
    assert split.matmul_flops_per_s("fp32", 8) == 0.35e11
    assert "matmul tp 2" in split.calibration()
    path = os.path.join(REPO, "configs", "gpt2_tiny.yaml")
    inp = read_config(path, world=2, overrides=["parallel.tp=2"])
    assert step_time(inp, split).compute_by_class_s["matmul"] == pytest.approx(
        2 * step_time(inp, plain).compute_by_class_s["matmul"])
    with pytest.raises(ValueError, match="key '1' must be a tp degree >= 2"):
        load_profile(dict(SYNTHETIC, compute=dict(SYNTHETIC["compute"], matmul_flops_per_s_by_tp={"1": 1e11})))


@pytest.mark.parametrize("entry, message", [
    ({"alpha_s": 1e-6, "beta_s_per_byte": 1e-10, "ranks": 8, "measured_with": "x"}, "intra_by_ranks.8x3.group"),
    (_link(1e-6, 1e-10, 8, 3), "group 3 does not divide ranks 8"),
    (_link(1e-6, 1e-10, 0, 1), "ranks' must be a whole number"),
    (_link(-1e-6, 1e-10, 8, 2), "alpha_s' must be >= 0"),
])
def test_a_wrong_shared_link_names_its_key(entry, message):
    bad = dict(SYNTHETIC, links={"intra_by_ranks": {"8x3": entry}})
    with pytest.raises(ValueError, match=message):
        load_profile(bad)


BENCH_COLLECTIVES = os.path.join(REPO, "build", "benchmarks", "bench_collectives")


@pytest.mark.skipif(not os.path.exists(BENCH_GEMM), reason="build/benchmarks/bench_gemm missing")
def test_a_profile_the_benchmark_could_not_write_is_refused_before_it_measures(tmp_path):
    missing = tmp_path / "no_such_folder" / "profile.json"
    not_json = tmp_path / "profile.json"
    not_json.write_text("[1, 2]")
    for path, reason in ((missing, "cannot write"), (not_json, "the top level is not an object; not overwritten")):
        start = time.monotonic()
        result = subprocess.run([BENCH_GEMM, "--quick", "--profile", str(path)], capture_output=True, text=True,
                                timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert result.returncode == 1, result.stderr
        assert result.stderr.startswith(f"bench_gemm: machine profile {path}: ") and reason in result.stderr
        assert "GFLOP/s" not in result.stdout and time.monotonic() - start < 10  # nothing was measured
    assert not missing.parent.exists() and not_json.read_text() == "[1, 2]"


@pytest.mark.skipif(not os.path.exists(BENCH_COLLECTIVES) or shutil.which("mpirun") is None,
                    reason="build/benchmarks/bench_collectives or mpirun missing")
def test_bench_collectives_ends_the_job_with_the_reason_when_the_link_cannot_be_fitted(tmp_path):
    # One size: no alpha-beta fit. The rank that fits (0) ends the job with the reason, not std::terminate's
    # abort, and the profile is left as it was.
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({k: v for k, v in SYNTHETIC.items() if k != "links"}))
    before = path.read_text()
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    result = subprocess.run([shutil.which("mpirun"), *root, "--oversubscribe", "-np", "2", BENCH_COLLECTIVES, "--op",
                             "all_reduce", "--min-bytes", "4K", "--max-bytes", "4K", "--iters", "2", "--warmup", "1",
                             "--profile", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "[rank 0] fatal: bench_collectives: alpha-beta fit needs >= 2 ranks and >= 2 sizes" in result.stderr
    assert "signal 6" not in result.stderr and path.read_text() == before


@pytest.mark.skipif(not os.path.exists(BENCH_COLLECTIVES) or shutil.which("mpirun") is None,
                    reason="build/benchmarks/bench_collectives or mpirun missing")
def test_bench_collectives_writes_the_link_of_concurrent_groups(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({k: v for k, v in SYNTHETIC.items() if k != "links"}))  # bench_gemm's part
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    base = [shutil.which("mpirun"), *root, "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-x",
            "OMP_NUM_THREADS=1", "-np", "4", BENCH_COLLECTIVES, "--op", "all_reduce", "--min-bytes", "4K",
            "--max-bytes", "16M", "--factor", "16", "--iters", "4", "--warmup", "1", "--profile", str(path)]
    # After compute, sizes from 1M: a small size's added time can vanish under load (left out of the fit).
    for extra in (["--group-size", "2"], [], ["--group-size", "2", "--compute-gemms", "2", "--min-bytes", "1M",
                                              "--factor", "4"]):
        result = subprocess.run(base + extra, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
    profile = load_profile(path)
    shared = profile["links"]["intra_by_ranks"]
    assert set(shared) == {"4x2", "4x4"}
    assert (shared["4x2"]["ranks"], shared["4x2"]["group"]) == (4, 2)
    assert "2 concurrent groups of 2" in shared["4x2"]["measured_with"]
    # 4 ranks on this 2-core machine are contended: links.intra (the uncontended link) is not written.
    assert ("intra" in profile["links"]) == (4 <= os.cpu_count())
    assert "bench_collectives_4x2" in profile["commands"] and "bench_collectives_4x4" in profile["commands"]
    # After compute: its own key, which the planner prefers.
    in_step = profile["links"]["intra_in_step_by_ranks"]["4x2"]
    assert "after 2 GEMMs" in in_step["measured_with"] and in_step["beta_s_per_byte"] > 0
    hw = hardware_from("cpu_host", profile=path)
    assert hw.intra_link(4, 2).source.endswith(in_step["measured_with"])
    assert hw.intra_by_ranks[0][2].source.endswith(shared["4x2"]["measured_with"])
    bad = subprocess.run(base[:-2] + ["--group-size", "3"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--group-size 3 must divide the 4 ranks" in bad.stderr


def test_repeated_runs_of_a_layout_count_at_their_median():
    second = SCALING_TABLE.replace("| 675     |", "| 900     |").replace("| 700     | 2927", "| 600     | 2927")
    third = SCALING_TABLE.replace("| 675     |", "| 700     |")
    rows = pvs.median_of_runs(pvs.parse_scaling(SCALING_TABLE + second + third))
    assert [r.layout for r in rows] == [r.layout for r in pvs.parse_scaling(SCALING_TABLE)]
    by = {r.layout: r for r in rows}
    dp2 = by["dp2 tp1 pp1"]
    assert (dp2.runs, dp2.step_s, dp2.low_s, dp2.high_s) == (3, 0.700, 0.675, 0.900)
    assert by["dp1 tp1 pp4"].step_s == 0.700 and by["dp1 tp1 pp4"].low_s == 0.600
    two = pvs.median_of_runs(pvs.parse_scaling(SCALING_TABLE + second))
    # even count: the mean of the middle two
    assert {r.layout: r for r in two}["dp2 tp1 pp1"].step_s == pytest.approx(0.7875)
    table = pvs.table(pvs.predict(rows, SYNTHETIC))
    assert "0.700 (3 runs: 0.675–0.900)" in table
