"""The scheduling simulator checked against a live Slurm: ``python -m myriad.operations.slurm_trace --trace
FILE`` (with SLURM_CONF naming a cluster such as scripts/slurm_local.sh's).

Replays a cluster_sim trace (id, arrival, nodes, duration, priority) on Slurm — each job submitted
at its arrival as `sbatch --wrap "sleep DURATION"` asking for `nodes` CPUs of the one node, in the
partition of its class (prod -> high, research -> mid, best_effort -> low: PriorityTier 3 / 2 / 1,
preemption by partition priority, PreemptMode=REQUEUE) — and runs the simulator on the same trace
with the policy that matches (priority order by class then arrival, EASY backfill, preemption of
strictly lower classes, a preempted job killed and requeued with all its work lost: a sleep job
has no checkpoint; one "node" per CPU). Prints, per job, the first start, the end and the
preemptions in both, then the start order and the makespan (docs/cluster.md keeps a measured
table and where and why the two differ).

The harness does two things to Slurm that the comparison needs: the replay partitions' GraceTime
is set to 0 for the replay (a sleep job does not checkpoint; with a grace time Slurm would let the
victim run on), and a requeued job is released at once (`scontrol update StartTime=now`): Slurm
otherwise holds a requeued job for two minutes (Reason=BeginTime), which the simulator does not
model. Times are observed by polling (every 0.2 s) relative to the first submission.
"""
import argparse
import math
import re
import subprocess
import sys
import time

from . import cluster_sim

PARTITIONS = {"prod": "high", "research": "mid", "best_effort": "low"}
DONE = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")


def scontrol(*args, env=None):
    return subprocess.run(["scontrol", *args], env=env, capture_output=True, text=True, timeout=30)


def job_fields(job_id, env=None):
    out = scontrol("show", "job", "-o", job_id, env=env).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out.splitlines()[0])) if out.strip() else {}


def partition_grace(partition, env=None):
    out = scontrol("show", "partition", "-o", partition, env=env).stdout
    found = re.search(r"GraceTime=(\d+)", out)
    return int(found.group(1)) if found else 0


def replay(jobs, env=None, poll_s=0.2, timeout_s=600.0):
    """{job id: {"start", "end", "restarts"}} of the trace run on Slurm (seconds since the first
    submission; start = first seen running)."""
    graces = {p: partition_grace(p, env) for p in set(PARTITIONS.values())}
    for partition in graces:
        scontrol("update", f"PartitionName={partition}", "GraceTime=0", env=env)
    try:
        order = sorted(jobs, key=lambda j: (j.arrival, j.id))
        slurm_ids, seen = {}, {}
        t0 = time.time()
        while len(seen) < len(jobs) or any("end" not in s for s in seen.values()):
            now = time.time() - t0
            if now > timeout_s:
                raise RuntimeError(f"the trace did not finish in {timeout_s:.0f} s: {seen}")
            while order and order[0].arrival <= now:
                job = order.pop(0)
                minutes = max(1, math.ceil(job.duration / 60))
                submitted = subprocess.run(
                    ["sbatch", "--parsable", f"--partition={PARTITIONS[job.priority]}", f"--ntasks={job.nodes}",
                     f"--time={minutes}", "--requeue", f"--job-name={job.id}", "--output=/dev/null",
                     "--wrap", f"sleep {job.duration:g}"], env=env, capture_output=True, text=True, timeout=30)
                if submitted.returncode != 0:
                    raise RuntimeError(f"sbatch of trace job '{job.id}': {submitted.stderr.strip()}")
                slurm_ids[job.id] = submitted.stdout.strip().split(";")[0]
                seen[job.id] = {"submitted": now}
            for name, slurm_id in slurm_ids.items():
                record = seen[name]
                if "end" in record:
                    continue
                fields = job_fields(slurm_id, env)
                state = fields.get("JobState", "")
                if state == "RUNNING" and "start" not in record:
                    record["start"] = now
                if state == "PENDING" and fields.get("Reason") == "BeginTime":
                    scontrol("update", f"JobId={slurm_id}", "StartTime=now", env=env)
                if state in DONE:
                    record["end"] = now
                    record["state"] = state
                    record["restarts"] = int(fields.get("Restarts", 0))
            time.sleep(poll_s)
        return seen
    finally:
        for partition, grace in graces.items():
            scontrol("update", f"PartitionName={partition}", f"GraceTime={grace}", env=env)


def simulate(jobs, units):
    """{job id: {"start", "end", "preemptions"}} of the simulator on `units` one-CPU "nodes"."""
    topology = cluster_sim.Topology(pods=1, racks_per_pod=1, nodes_per_rack=units, gpus_per_node=1)
    policy = cluster_sim.Policy(order="priority", backfill=True, preempt=True, placement="first_fit")
    plain = [cluster_sim.Job(j.id, j.arrival, j.nodes, j.duration, j.priority, j.preemptible, 0.0, 0.0, 0.0)
             for j in jobs]
    sim = cluster_sim.Simulation(plain, topology, policy, preemption="kill")
    metrics = sim.run()
    return {j.id: {"start": metrics["start_s"][j.id], "end": metrics["finish_s"][j.id],
                   "preemptions": sim.preemptions[k]} for k, j in enumerate(plain)}


def compare(jobs, simulated, measured):
    """The comparison table (markdown) and a summary dict."""
    rows = ["| job | class | CPUs | arrival s | duration s | start sim / Slurm s | end sim / Slurm s "
            "| preempted sim / Slurm |", "|---|---|---|---|---|---|---|---|"]
    for j in sorted(jobs, key=lambda j: (j.arrival, j.id)):
        s, m = simulated[j.id], measured[j.id]
        rows.append(f"| {j.id} | {j.priority} | {j.nodes} | {j.arrival:g} | {j.duration:g} | "
                    f"{s['start']:.1f} / {m.get('start', float('nan')):.1f} | {s['end']:.1f} / {m['end']:.1f} | "
                    f"{s['preemptions']} / {m['restarts']} |")
    order_sim = [k for k, _ in sorted(simulated.items(), key=lambda kv: (kv[1]["start"], kv[0]))]
    order_slurm = [k for k, _ in sorted(measured.items(), key=lambda kv: (kv[1].get("start", math.inf), kv[0]))]
    summary = {
        "start_order_sim": order_sim, "start_order_slurm": order_slurm,
        "makespan_sim": max(s["end"] for s in simulated.values()),
        "makespan_slurm": max(m["end"] for m in measured.values()),
        "preemptions_sim": sum(s["preemptions"] for s in simulated.values()),
        "preemptions_slurm": sum(m["restarts"] for m in measured.values()),
        "states": sorted({m.get("state", "") for m in measured.values()}),
    }
    rows += ["", f"start order: simulator {' '.join(order_sim)}; Slurm {' '.join(order_slurm)}",
             f"makespan: simulator {summary['makespan_sim']:.1f} s, Slurm {summary['makespan_slurm']:.1f} s",
             f"preemptions: simulator {summary['preemptions_sim']}, Slurm {summary['preemptions_slurm']}"]
    return "\n".join(rows), summary


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m myriad.operations.slurm_trace",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", required=True, help="a cluster_sim trace (CSV or JSON); nodes = CPUs here")
    parser.add_argument("--cpus", type=int, default=None, help="CPUs of the Slurm node (default: sinfo's)")
    args = parser.parse_args(argv)
    jobs = cluster_sim.load_trace(args.trace)
    units = args.cpus or int(subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True,
                                            timeout=30).stdout.split()[0])
    simulated = simulate(jobs, units)
    measured = replay(jobs)
    text, _ = compare(jobs, simulated, measured)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
