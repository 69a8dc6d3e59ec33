"""myriad.operations.cluster_sim: hand-built traces with known schedules (FIFO head-of-line blocking vs EASY
backfill, priority order and aging, preemption with its exact lost work and costs in both modes,
best-fit vs first-fit placement and the span penalty), invariants over generated traces (no node
held twice, no node outside the cluster, busy GPU time = work + overheads), determinism, bad input,
traces on disk and the command line."""
import itertools
import json

import pytest

from myriad.operations import cluster_sim as cs

GPN = 8  # GPUs per node in the hand-built topologies


def job(id, arrival, nodes, duration, priority="research", **kw):
    return cs.Job(id, float(arrival), nodes, float(duration), priority, **kw)


def run(jobs, policy, topology=None, **kw):
    topology = topology or cs.Topology(1, 1, 4, GPN)
    placement = kw.pop("placement", "best_fit")
    aging_s = kw.pop("aging_s", 0.0)
    sim = cs.Simulation(jobs, topology, cs.Policy.parse(policy, placement, aging_s), **kw)
    return sim.run(), sim


def test_fifo_blocks_behind_the_head_and_backfill_starts_a_small_job_without_delaying_it():
    jobs = [job("A", 0, 3, 100), job("B", 1, 4, 100), job("C", 2, 1, 50), job("D", 3, 1, 200)]
    fifo, _ = run(jobs, "fifo")
    assert fifo["start_s"] == {"A": 0, "B": 100, "C": 200, "D": 200}  # C waits although a node is free
    backfill, _ = run(jobs, "fifo+backfill")
    # C ends at 52 <= the head's reservation at 100: backfilled. D (200 s) would delay B: it waits.
    assert backfill["start_s"] == {"A": 0, "B": 100, "C": 2, "D": 200}
    assert backfill["wait"]["research"]["max_s"] == 197 and fifo["wait"]["research"]["max_s"] == 198


def test_priority_order_and_aging():
    jobs = [job("A", 0, 2, 100), job("B", 1, 2, 100), job("C", 2, 2, 100, "prod")]
    topo = cs.Topology(1, 1, 2, GPN)
    assert run(jobs, "fifo", topo)[0]["start_s"] == {"A": 0, "B": 100, "C": 200}
    assert run(jobs, "priority", topo)[0]["start_s"] == {"A": 0, "C": 100, "B": 200}
    # Aging: a best_effort job that waited 99 s rises one class (per 50 s) and, arriving first, goes
    # ahead of a research job that waited 40 s; without aging the research job goes first.
    jobs = [job("A", 0, 2, 100), job("E", 1, 2, 100, "best_effort"), job("R", 60, 2, 100)]
    assert run(jobs, "priority", topo)[0]["start_s"] == {"A": 0, "R": 100, "E": 200}
    assert run(jobs, "priority", topo, aging_s=50.0)[0]["start_s"] == {"A": 0, "E": 100, "R": 200}


def preemption_trace():
    low = job("L", 0, 4, 1000, "best_effort", checkpoint_interval=300.0, checkpoint_cost=20.0, restart_cost=50.0)
    return [low, job("H", 400, 2, 100, "prod")]


def test_preemption_kill_loses_the_work_since_the_last_checkpoint():
    result, _ = run(preemption_trace(), "priority+preempt", preemption="kill")
    assert result["start_s"] == {"L": 0, "H": 400}
    # L had 400 s of progress, 300 s checkpointed: 100 s lost; it restarts when H ends at 500 and
    # pays 50 s of restart before the 700 s it has left.
    assert result["finish_s"] == {"L": 1250, "H": 500}
    assert result["preemptions"] == 1 and result["preempted_jobs"] == 1
    assert result["lost_gpu_s"] == pytest.approx(100 * 4 * GPN)
    assert result["restart_gpu_s"] == pytest.approx(50 * 4 * GPN)
    assert result["save_gpu_s"] == 0
    assert result["work_gpu_s"] == pytest.approx((1000 * 4 + 100 * 2) * GPN)
    assert result["busy_gpu_s"] == pytest.approx((1000 * 4 + 100 * 2 + 100 * 4 + 50 * 4) * GPN)
    assert result["utilisation_makespan"] == pytest.approx(4800 / (4 * 1250))


def test_preemption_with_checkpoint_pays_the_save_and_delays_the_preemptor():
    classes = (cs.PriorityClass("prod", 0, 10.0, False), cs.PriorityClass("research", 1),
               cs.PriorityClass("best_effort", 2))
    result, _ = run(preemption_trace(), "priority+preempt", preemption="checkpoint", classes=classes)
    # L writes a 20 s checkpoint on its nodes; H runs from 420 to 520; L (nothing lost) restarts at
    # 520 with 50 s of restart and 600 s left.
    assert result["start_s"] == {"L": 0, "H": 420}
    assert result["finish_s"] == {"L": 1170, "H": 520}
    assert result["lost_gpu_s"] == pytest.approx(0, abs=1e-6)
    assert result["save_gpu_s"] == pytest.approx(20 * 4 * GPN)
    assert result["overhead_gpu_s"] == pytest.approx((20 + 50) * 4 * GPN)
    assert result["wait"]["prod"]["sla_misses"] == 1  # waited 20 s against a 10 s target
    assert run(preemption_trace(), "priority")[0]["start_s"]["H"] == 1000  # without preemption


def test_preemption_takes_the_lowest_class_and_never_a_non_preemptible_job():
    jobs = [job("R", 0, 2, 1000), job("E", 0, 2, 1000, "best_effort"), job("P", 100, 2, 50, "prod")]
    result, _ = run(jobs, "priority+preempt", preemption="kill")
    assert result["start_s"]["P"] == 100 and result["finish_s"]["R"] == 1000
    assert result["finish_s"]["E"] > 1000 and result["preemptions"] == 1
    prods = [job("P1", 0, 4, 100, "prod"), job("P2", 10, 4, 100, "prod"),
             job("R", 20, 4, 100), job("Q", 30, 4, 100, "prod", preemptible=False)]
    result, _ = run(prods, "priority+backfill+preempt")
    assert result["preemptions"] == 0
    assert result["start_s"] == {"P1": 0, "P2": 100, "Q": 200, "R": 300}


def test_best_fit_uses_the_rack_with_exactly_the_free_nodes_first_fit_splits():
    topo = cs.Topology(1, 3, 4, GPN)
    jobs = [job("X", 0, 3, 1000), job("Y", 1, 2, 1000), job("Z", 2, 2, 1000)]
    best, sim = run(jobs, "fifo", topo)
    nodes = {a[0]: a[3] for a in sim.allocations}
    assert nodes == {"X": (0, 1, 2), "Y": (4, 5), "Z": (6, 7)}  # Z: rack 1's two free nodes
    assert best["split_jobs"] == 0
    first, sim = run(jobs, "fifo", topo, placement="first_fit")
    assert {a[0]: a[3] for a in sim.allocations} == {"X": (0, 1, 2), "Y": (3, 4), "Z": (5, 6)}
    assert first["split_jobs"] == pytest.approx(1 / 3)
    # The split job runs slower under a span penalty; the slowdown is booked apart from the work.
    slow, _ = run(jobs, "fifo", topo, placement="first_fit", span_penalty=0.5)
    assert slow["finish_s"]["Y"] == pytest.approx(1 + 1500) and slow["finish_s"]["Z"] == 1002
    assert slow["slowdown_gpu_s"] == pytest.approx(500 * 2 * GPN)
    assert run(jobs, "fifo", topo, span_penalty=0.5)[0]["slowdown_gpu_s"] == 0


def test_place_spans_the_fewest_racks():
    topo = cs.Topology(1, 3, 4, GPN)
    free = [3, 6, 7, 8, 9, 10, 11]  # rack 0: 1 free, rack 1: 2, rack 2: 4
    assert cs.place(topo, free, 2, "best_fit") == [6, 7]
    assert cs.place(topo, free, 2, "first_fit") == [3, 6]
    assert cs.place(topo, free, 6, "best_fit") == [6, 7, 8, 9, 10, 11]  # 2 racks, not 3
    two_pods = cs.Topology(2, 2, 2, GPN)  # pod 0: racks 0, 1; pod 1: racks 2, 3
    assert cs.place(two_pods, [1, 2, 3, 4, 5, 6, 7], 3, "best_fit") == [1, 2, 3]  # inside pod 0


def check_invariants(result, sim, jobs, topology):
    per_node = {}
    for _, start, end, nodes in sim.allocations:
        assert end >= start
        for n in nodes:
            assert 0 <= n < topology.nodes
            per_node.setdefault(n, []).append((start, end))
    for spans in per_node.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end <= start + 1e-6, "a node was held by two jobs at once"
    gpus = {j.id: j.nodes * topology.gpus_per_node for j in jobs}
    for j in jobs:
        assert j.nodes <= topology.nodes
        assert result["start_s"][j.id] >= j.arrival and result["finish_s"][j.id] >= result["start_s"][j.id]
    work = sum(gpus[j.id] * j.duration for j in jobs)
    assert result["work_gpu_s"] == pytest.approx(work, rel=1e-9)
    overheads = sum(result[k] for k in ("slowdown_gpu_s", "lost_gpu_s", "restart_gpu_s", "save_gpu_s"))
    assert result["busy_gpu_s"] == pytest.approx(work + overheads, rel=1e-9)
    assert result["overhead_gpu_s"] == pytest.approx(result["lost_gpu_s"] + result["restart_gpu_s"]
                                                     + result["save_gpu_s"])
    # Busy GPUs never exceed the cluster's at any moment.
    edges = sorted([(t0, g) for t0, t1, g, _ in sim.busy] + [(t1, -g) for t0, t1, g, _ in sim.busy],
                   key=lambda e: (e[0], e[1]))
    level = 0.0
    for _, delta in edges:
        level += delta
        assert level <= topology.gpus + 1e-6


POLICIES = ("fifo", "priority", "priority+backfill", "priority+backfill+preempt", "fifo+backfill+preempt")


@pytest.mark.parametrize("preemption", ["checkpoint", "kill"])
def test_invariants_on_generated_traces(preemption):
    topology = cs.Topology(1, 2, 4, 4)
    traces = {seed: cs.generate_trace(150, topology, seed=seed, load=1.1, checkpoint_interval_s=900.0)
              for seed in (5, 6)}
    preempted = 0
    for (_seed, jobs), policy, placement in itertools.product(traces.items(), POLICIES, cs.PLACEMENTS):
        result, sim = run(jobs, policy, topology, placement=placement, preemption=preemption, seed=3,
                          span_penalty=0.2)
        check_invariants(result, sim, jobs, topology)
        preempted += result["preemptions"]
        assert 0 < result["utilisation"] <= 1 and result["goodput"] <= result["utilisation"]
    assert preempted > 0  # the preemption paths were exercised


def test_determinism():
    topology = cs.Topology()
    a = cs.generate_trace(200, topology, seed=7)
    assert a == cs.generate_trace(200, topology, seed=7)
    assert a != cs.generate_trace(200, topology, seed=8)
    sizes = [j.nodes for j in a]
    assert sizes.count(1) > len(a) / 3 and max(sizes) >= 16  # many small jobs, a few big ones
    policy = cs.Policy.parse("priority+backfill+preempt", "random")
    assert cs.simulate(a, topology, policy, seed=1) == cs.simulate(a, topology, policy, seed=1)


def test_bad_inputs_name_the_job():
    topo = cs.Topology(1, 1, 4, GPN)
    with pytest.raises(ValueError, match=r"job 'huge': wants 5 nodes, but the cluster has 4"):
        run([job("ok", 0, 1, 10), job("huge", 0, 5, 10)], "fifo", topo)
    with pytest.raises(ValueError, match=r"job 'x': priority 'gold' is not one of prod, research, best_effort"):
        run([job("x", 0, 1, 10, "gold")], "fifo", topo)
    with pytest.raises(ValueError, match=r"job 'x': the id appears twice"):
        run([job("x", 0, 1, 10), job("x", 1, 1, 10)], "fifo", topo)
    with pytest.raises(ValueError, match=r"job 'y': duration must be > 0"):
        run([job("y", 0, 1, 0)], "fifo", topo)
    with pytest.raises(ValueError, match="unknown part 'lifo'"):
        cs.Policy.parse("priority+lifo")
    with pytest.raises(ValueError, match="topology.racks_per_pod"):
        cs.Topology(1, 0, 4, 8)


def test_trace_files_round_trip_and_bad_lines_are_named(tmp_path):
    jobs = cs.generate_trace(20, cs.Topology(), seed=2) + [job("fixed", 5, 2, 60, "prod", preemptible=True)]
    for name in ("t.csv", "t.json"):
        cs.write_trace(jobs, str(tmp_path / name))
        assert cs.load_trace(str(tmp_path / name)) == jobs
    bad = tmp_path / "bad.csv"
    bad.write_text("id,arrival,nodes,duration\na,0,1,10\nb,1,two,10\n")
    with pytest.raises(ValueError, match=r"bad.csv line 3 \(job 'b'\)"):
        cs.load_trace(str(bad))


def test_percentile_is_nearest_rank():
    assert cs.percentile([1, 2, 3, 4], 50) == 2 and cs.percentile([1, 2, 3, 4], 95) == 4
    assert cs.percentile([], 50) is None


def test_main_prints_the_table_and_writes_json_and_plot(tmp_path, capsys):
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    argv = ["--jobs", "60", "--seed", "2", "--policies", "fifo,priority+backfill+preempt", "--json", str(out_json)]
    try:
        import matplotlib  # noqa: F401
        argv += ["--plot", str(out_png)]
    except ImportError:
        out_png = None
    assert cs.main(argv) == 0
    out = capsys.readouterr().out
    assert "fifo " in out and "priority+backfill+preempt" in out and "best_effort" in out
    results = json.loads(out_json.read_text())
    assert [r["policy"] for r in results] == ["fifo", "priority+backfill+preempt"]
    assert results[0]["jobs"] == 60 and set(results[0]["wait"]) <= {"prod", "research", "best_effort"}
    if out_png is not None:
        assert out_png.stat().st_size > 10000
    assert cs.main(["--policies", "lifo"]) == 2
    assert "must start with fifo or priority" in capsys.readouterr().err
