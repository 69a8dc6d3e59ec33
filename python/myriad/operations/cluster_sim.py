"""Cluster scheduling simulator for capacity planning: ``python -m myriad.operations.cluster_sim --policies
fifo,priority,priority+backfill,priority+backfill+preempt --placement best_fit --jobs 500 --seed 1``.

A discrete-event simulation of training jobs sharing a cluster of pods -> racks -> nodes (whole
nodes per job, `gpus_per_node` GPUs each). Jobs come from a trace (generate_trace: Poisson
arrivals, heavy-tailed sizes, lognormal durations, a priority mix; or load_trace: CSV / JSON).
A policy (Policy.parse) orders the queue (fifo by arrival, or priority by class then arrival, with
optional aging), may backfill (EASY: a later job starts now if it fits and does not delay the
head job's reservation, with the durations as run-time estimates) and may preempt (the job at the
head of the queue takes the nodes of running preemptible jobs of a strictly lower class, cheapest
first), and places jobs on nodes (best_fit: the fullest single rack that holds the job, else the
fewest racks inside the fullest pod that holds it; first_fit: the lowest free node ids; random).
Docs: docs/planning.md, "Cluster scheduling simulator".

Preemption cost (the goodput model's terms, docs/planning.md: lost work + restart and load; a
preemption is announced, so there is no detection time):
- a job's progress is checkpointed every `checkpoint_interval` seconds of work (0 = never; the
  periodic saves are inside `duration`, the uninterrupted run time);
- preemption="checkpoint" (myriad: SIGTERM/SIGUSR1 -> checkpoint at the next step, exit 0): the
  victim keeps all its progress but holds its nodes `checkpoint_cost` more seconds to write it (if
  it has started executing), so the preempting job starts that much later, and it is requeued once
  the checkpoint is written; preemption="kill": the nodes are free at once, the work since the
  last periodic checkpoint is lost and the victim is requeued at once;
- every restart after a preemption first spends `restart_cost` seconds (start-up + load).
Placement cost: span_penalty > 0 slows a job by that fraction per rack it spans beyond the fewest
its size needs (0 by default: placement then changes only the fragmentation metrics).
Invariants (tested): per node, allocations never overlap and every node id exists; busy GPU time =
sum of gpus x duration + slowdown + restart + lost + save GPU time; the same (trace, policy, seed)
gives the same result. No global state: each Simulation owns its random.Random (random placement).
Standard library only; matplotlib is imported by plot() alone (Agg).
"""
import argparse
import csv
import dataclasses
import heapq
import json
import math
import random
import sys
from typing import Optional

PLACEMENTS = ("best_fit", "first_fit", "random")
PREEMPTION_MODES = ("checkpoint", "kill")
DRAIN = -1  # node owner while a preempted job writes its checkpoint


@dataclasses.dataclass(frozen=True)
class Topology:
    """pods x racks_per_pod x nodes_per_rack nodes; node ids run pod-major, then rack, then node."""
    pods: int = 2
    racks_per_pod: int = 4
    nodes_per_rack: int = 16
    gpus_per_node: int = 8

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"topology.{field.name} must be an integer >= 1, got {value!r}")

    @property
    def racks(self):
        return self.pods * self.racks_per_pod

    @property
    def nodes(self):
        return self.racks * self.nodes_per_rack

    @property
    def gpus(self):
        return self.nodes * self.gpus_per_node

    def rack_of(self, node):
        return node // self.nodes_per_rack

    def pod_of_rack(self, rack):
        return rack // self.racks_per_pod


@dataclasses.dataclass(frozen=True)
class PriorityClass:
    """rank 0 is the highest; max_wait_s: SLA target from arrival to start (None = none);
    preemptible: the default of its jobs."""
    name: str
    rank: int
    max_wait_s: Optional[float] = None
    preemptible: bool = True


DEFAULT_CLASSES = (PriorityClass("prod", 0, 3600.0, False), PriorityClass("research", 1, 8 * 3600.0, True),
                   PriorityClass("best_effort", 2, None, True))


@dataclasses.dataclass(frozen=True)
class Job:
    """One training job. Times in seconds; preemptible None = its class's default."""
    id: str
    arrival: float
    nodes: int
    duration: float
    priority: str = "research"
    preemptible: Optional[bool] = None
    checkpoint_interval: float = 1800.0
    checkpoint_cost: float = 60.0
    restart_cost: float = 300.0


@dataclasses.dataclass(frozen=True)
class Policy:
    """order fifo | priority; backfill: EASY; preempt: of strictly lower classes; aging_s > 0: a
    queued job rises one class per aging_s of waiting (priority order only)."""
    order: str = "priority"
    backfill: bool = False
    preempt: bool = False
    placement: str = "best_fit"
    aging_s: float = 0.0

    @property
    def name(self):
        return "+".join([self.order] + [f for f in ("backfill", "preempt") if getattr(self, f)])

    @classmethod
    def parse(cls, text, placement="best_fit", aging_s=0.0):
        """'priority+backfill+preempt' -> Policy; ValueError naming an unknown part."""
        parts = [p.strip() for p in text.split("+")]
        if parts[0] not in ("fifo", "priority"):
            raise ValueError(f"policy '{text}': must start with fifo or priority, got '{parts[0]}'")
        for part in parts[1:]:
            if part not in ("backfill", "preempt"):
                raise ValueError(f"policy '{text}': unknown part '{part}' (allowed: backfill, preempt)")
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got '{placement}'")
        if aging_s < 0:
            raise ValueError(f"aging_s must be >= 0, got {aging_s}")
        return cls(parts[0], "backfill" in parts[1:], "preempt" in parts[1:], placement, aging_s)


def place(topology, free, need, method="best_fit", rng=None):
    """`need` node ids out of the sorted list `free` (len(free) >= need), by `method`."""
    if method == "first_fit":
        return list(free[:need])
    if method == "random":
        return sorted((rng or random.Random(0)).sample(list(free), need))
    by_rack = {}
    for n in free:
        by_rack.setdefault(topology.rack_of(n), []).append(n)
    fitting = [r for r, nodes in by_rack.items() if len(nodes) >= need]
    if fitting:  # the fullest rack that holds the job entirely
        rack = min(fitting, key=lambda r: (len(by_rack[r]), r))
        return by_rack[rack][:need]
    pods = {}
    for r, nodes in by_rack.items():
        pods[topology.pod_of_rack(r)] = pods.get(topology.pod_of_rack(r), 0) + len(nodes)
    holding = [p for p, count in pods.items() if count >= need]
    if holding:  # the fullest pod that holds it, then the fewest racks inside it
        pod = min(holding, key=lambda p: (pods[p], p))
        racks = [r for r in by_rack if topology.pod_of_rack(r) == pod]
    else:
        racks = list(by_rack)
    chosen, remaining = [], need
    racks.sort(key=lambda r: (-len(by_rack[r]), r))
    while remaining:
        fits = [r for r in racks if len(by_rack[r]) >= remaining]
        if fits:  # the last rack: the fullest one that holds the rest
            rack = min(fits, key=lambda r: (len(by_rack[r]), r))
            chosen += by_rack[rack][:remaining]
            break
        rack = racks.pop(0)  # else the emptiest rack, whole
        chosen += by_rack[rack]
        remaining -= len(by_rack[rack])
    return sorted(chosen)


@dataclasses.dataclass
class _Segment:
    nodes: tuple
    t_alloc: float
    run_start: float
    restart: float
    end: float
    factor: float  # wall seconds per second of work on this placement (>= 1)


def percentile(sorted_values, p):
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_values:
        return None
    k = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[k - 1]


class Simulation:
    """One run of `policy` over `jobs` on `topology`; run() returns the metrics dict. After run(),
    `allocations` lists (job id, start, end, node ids) and `busy` (start, end, gpus, kind) with
    kind work | slowdown | lost | restart | save."""

    def __init__(self, jobs, topology, policy, classes=DEFAULT_CLASSES, preemption="checkpoint", seed=0,
                 window_s=None, span_penalty=0.0):
        if not span_penalty >= 0:
            raise ValueError(f"span_penalty must be >= 0, got {span_penalty}")
        self.span_penalty = span_penalty
        if preemption not in PREEMPTION_MODES:
            raise ValueError(f"preemption must be one of {', '.join(PREEMPTION_MODES)}, got '{preemption}'")
        if window_s is not None and window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.topology, self.policy, self.preemption, self.window_s = topology, policy, preemption, window_s
        self.classes = {c.name: c for c in classes}
        self.jobs = list(jobs)
        validate_jobs(self.jobs, topology, self.classes)
        self.rng = random.Random(seed)
        self.allocations, self.busy, self.placements = [], [], []

    # --- helpers -----------------------------------------------------------------------------------
    def _rank(self, i):
        return self.classes[self.jobs[i].priority].rank

    def _preemptible(self, i):
        job = self.jobs[i]
        return self.classes[job.priority].preemptible if job.preemptible is None else job.preemptible

    def _gpus(self, i):
        return self.jobs[i].nodes * self.topology.gpus_per_node

    def _order_key(self, i, now):
        job = self.jobs[i]
        if self.policy.order == "fifo":
            return (job.arrival, i)
        rank = self._rank(i)
        if self.policy.aging_s > 0:
            rank = max(0, rank - int((now - job.arrival) // self.policy.aging_s))
        return (rank, job.arrival, i)

    def _free_nodes(self):
        return [n for n, owner in enumerate(self.owner) if owner is None]

    def _factor(self, i, nodes):
        """Slow-down of job i on `nodes`: 1 + span_penalty per rack beyond the fewest it could use."""
        racks = len({self.topology.rack_of(n) for n in nodes})
        fewest = math.ceil(self.jobs[i].nodes / self.topology.nodes_per_rack)
        return 1.0 + self.span_penalty * (racks - fewest)

    def _expected_run(self, i, nodes):
        job = self.jobs[i]
        restart = job.restart_cost if self.preemptions[i] else 0.0
        return restart + (job.duration - self.saved[i]) * self._factor(i, nodes)

    def _record_run(self, t0, t1, gpus, factor, kind):
        """Running from t0 to t1 at `factor`: kind work or lost; for work, the part the slow-down
        adds is recorded as kind slowdown."""
        if kind == "work":
            self._record_busy(t0, t1, gpus / factor, "work")
            if factor > 1.0:
                self._record_busy(t0, t1, gpus * (1.0 - 1.0 / factor), "slowdown")
        else:
            self._record_busy(t0, t1, gpus, kind)

    def _push(self, time, kind, i, token=0):
        order = {"finish": 0, "release": 1, "arrival": 2}[kind]
        heapq.heappush(self.events, (time, order, self.seq, kind, i, token))
        self.seq += 1

    def _record_busy(self, t0, t1, gpus, kind):
        if t1 > t0:
            self.busy.append((t0, t1, gpus, kind))

    # --- state changes ---------------------------------------------------------------------------
    def _start(self, i, nodes, now, delay=0.0):
        job = self.jobs[i]
        for n in nodes:
            assert self.owner[n] is None, f"node {n} is taken"
            self.owner[n] = i
        self.free -= len(nodes)
        restart = job.restart_cost if self.preemptions[i] else 0.0
        run_start = now + delay
        factor = self._factor(i, nodes)
        end = run_start + restart + (job.duration - self.saved[i]) * factor
        self.running[i] = _Segment(tuple(nodes), now, run_start, restart, end, factor)
        if self.first_start[i] is None:
            self.first_start[i] = run_start
        racks = {self.topology.rack_of(n) for n in nodes}
        self.placements.append((job.id, job.nodes, len(racks)))
        self.token[i] += 1
        self._push(end, "finish", i, self.token[i])

    def _release(self, i, seg, now, nodes):
        for n in nodes:
            self.owner[n] = None
        self.free += len(nodes)
        if nodes:
            self.allocations.append((self.jobs[i].id, seg.t_alloc, now, tuple(nodes)))

    def _finish(self, i, now):
        seg = self.running.pop(i)
        gpus = self._gpus(i)
        self._record_busy(seg.run_start, seg.run_start + seg.restart, gpus, "restart")
        self._record_run(seg.run_start + seg.restart, now, gpus, seg.factor, "work")
        self.saved[i] = self.jobs[i].duration
        self.finish[i] = now
        self._release(i, seg, now, seg.nodes)

    def _preempt(self, i, now, transferred):
        """Stops running job i at `now`; its nodes in `transferred` go to the preempting job, the
        rest are free (kill) or drain until its checkpoint is written. Returns how long the
        transferred nodes stay busy (the preempting job's start delay)."""
        job, seg, gpus = self.jobs[i], self.running.pop(i), self._gpus(i)
        executed = max(0.0, now - seg.run_start)
        restart_part = min(executed, seg.restart)
        progress = self.saved[i] + (executed - restart_part) / seg.factor
        if self.preemption == "checkpoint":
            kept, save = progress, (job.checkpoint_cost if executed > 0 else 0.0)
        else:
            periodic = (math.floor(progress / job.checkpoint_interval) * job.checkpoint_interval
                        if job.checkpoint_interval > 0 else 0.0)
            kept, save = max(self.saved[i], periodic), 0.0
        t = seg.run_start
        self._record_busy(t, t + restart_part, gpus, "restart")
        t += restart_part
        checkpointed = min(now, t + (kept - self.saved[i]) * seg.factor)
        self._record_run(t, checkpointed, gpus, seg.factor, "work")
        self._record_run(checkpointed, now, gpus, seg.factor, "lost")
        self._record_busy(now, now + save, gpus, "save")
        self.saved[i] = kept
        if executed > 0:
            self.preemptions[i] += 1
        elif self.first_start[i] == seg.run_start:
            self.first_start[i] = None  # bumped before it ever ran: it has not started yet
        self.token[i] += 1  # its finish event no longer applies
        moved = [n for n in seg.nodes if n in transferred]
        kept_nodes = [n for n in seg.nodes if n not in transferred]
        if moved:
            self.allocations.append((job.id, seg.t_alloc, now, tuple(moved)))
        for n in moved:
            self.owner[n] = None
        self.free += len(moved)
        # Its nodes are in use until its checkpoint is written, or, for a job still waiting for the
        # checkpoints of the jobs it preempted itself (run_start > now), until those are written.
        ready = max(now + save, seg.run_start)
        if ready > now:
            for n in kept_nodes:
                self.owner[n] = DRAIN
            self.draining.append((ready, i, seg.t_alloc, tuple(kept_nodes), save > 0))
            self._push(ready, "release", i)
        else:
            self._release(i, seg, now, kept_nodes)
        if save == 0:
            self.queue.append(i)  # else once its checkpoint is written
        return ready - now

    def _drain_done(self, now):
        still = []
        for entry in self.draining:
            end, i, t_alloc, nodes, requeue = entry
            if end <= now:
                for n in nodes:
                    self.owner[n] = None
                self.free += len(nodes)
                if nodes:
                    self.allocations.append((self.jobs[i].id, t_alloc, end, nodes))
                if requeue:
                    self.queue.append(i)
            else:
                still.append(entry)
        self.draining = still

    # --- policy ----------------------------------------------------------------------------------
    def _try_preempt(self, i, now):
        need, rank = self.jobs[i].nodes, self._rank(i)
        victims = [v for v in self.running if self._preemptible(v) and self._rank(v) > rank]
        if self.free + sum(self.jobs[v].nodes for v in victims) < need:
            return False

        def cost(v):  # GPU-seconds a preemption of v would waste now
            job, seg = self.jobs[v], self.running[v]
            executed = max(0.0, now - seg.run_start)
            if self.preemption == "checkpoint":
                waste = (job.checkpoint_cost if executed > 0 else 0.0) + job.restart_cost
            else:
                progress = self.saved[v] + max(0.0, executed - seg.restart) / seg.factor
                periodic = (math.floor(progress / job.checkpoint_interval) * job.checkpoint_interval
                            if job.checkpoint_interval > 0 else 0.0)
                lost = (progress - max(self.saved[v], periodic)) * seg.factor
                waste = lost + min(executed, seg.restart) + job.restart_cost
            return waste * self._gpus(v)

        victims.sort(key=lambda v: (-self._rank(v), cost(v), -self.running[v].t_alloc, v))
        chosen, available = [], self.free
        for v in victims:
            if available >= need:
                break
            chosen.append(v)
            available += self.jobs[v].nodes
        for v in reversed(list(chosen)):  # drop victims not needed after all
            if available - self.jobs[v].nodes >= need:
                chosen.remove(v)
                available -= self.jobs[v].nodes
        pool = sorted(self._free_nodes() + [n for v in chosen for n in self.running[v].nodes])
        nodes = place(self.topology, pool, need, self.policy.placement, self.rng)
        taken = set(nodes)
        delay = 0.0
        for v in chosen:
            if taken.intersection(self.running[v].nodes):
                delay = max(delay, self._preempt(v, now, taken))
        self.queue.remove(i)
        self._start(i, nodes, now, delay)
        return True

    def _reservation(self, need, now):
        """(shadow time, spare nodes then) for a job of `need` nodes: when enough nodes will be free
        if the running jobs end as expected (their end times are exact here)."""
        ends = sorted([(seg.end, len(seg.nodes)) for seg in self.running.values()] +
                      [(entry[0], len(entry[3])) for entry in self.draining])
        available = self.free
        for end, count in ends:
            available += count
            if available >= need:
                return end, available - need
        raise AssertionError("a queued job needs more nodes than the cluster has")

    def _schedule(self, now):
        """One pass over the queue; True when it started a job (run() repeats the pass until none
        starts, so that jobs requeued by a preemption are considered at once)."""
        started = False
        blocked = False
        shadow = spare = None
        for i in sorted(self.queue, key=lambda j: self._order_key(j, now)):
            need = self.jobs[i].nodes
            if not blocked:
                if need <= self.free:
                    self.queue.remove(i)
                    self._start(i, place(self.topology, self._free_nodes(), need, self.policy.placement, self.rng),
                                now)
                    started = True
                    continue
                if self.policy.preempt and self._try_preempt(i, now):
                    started = True
                    continue
                if not self.policy.backfill:
                    return started
                blocked = True
                shadow, spare = self._reservation(need, now)
                continue
            if need > self.free:
                continue
            nodes = place(self.topology, self._free_nodes(), need, self.policy.placement, self.rng)
            ends_in_time = now + self._expected_run(i, nodes) <= shadow
            if ends_in_time or need <= spare:
                if not ends_in_time:
                    spare -= need
                self.queue.remove(i)
                self._start(i, nodes, now)
                started = True
        return started

    # --- main loop -------------------------------------------------------------------------------
    def run(self):
        n = len(self.jobs)
        self.owner = [None] * self.topology.nodes
        self.free = self.topology.nodes
        self.running, self.queue, self.draining, self.events, self.seq = {}, [], [], [], 0
        self.saved, self.preemptions, self.token = [0.0] * n, [0] * n, [0] * n
        self.first_start, self.finish = [None] * n, [None] * n
        self.allocations, self.busy, self.placements = [], [], []
        for i, job in enumerate(self.jobs):
            self._push(job.arrival, "arrival", i)
        while self.events:
            now = self.events[0][0]
            while self.events and self.events[0][0] == now:
                _, _, _, kind, i, token = heapq.heappop(self.events)
                if kind == "arrival":
                    self.queue.append(i)
                elif kind == "finish" and token == self.token[i] and i in self.running:
                    self._finish(i, now)
                elif kind == "release":
                    self._drain_done(now)
            while self._schedule(now):
                pass
        assert not self.queue and not self.running, "jobs left unscheduled"
        return self._metrics()

    def _metrics(self):
        topo, jobs = self.topology, self.jobs
        makespan = max(self.finish) if jobs else 0.0
        last_arrival = max(job.arrival for job in jobs) if jobs else 0.0
        horizon = self.window_s or (last_arrival if last_arrival > 0 else makespan)
        capacity = topo.gpus * horizon
        totals = {"work": 0.0, "slowdown": 0.0, "lost": 0.0, "restart": 0.0, "save": 0.0}
        in_window = dict(totals)
        for t0, t1, gpus, kind in self.busy:
            totals[kind] += (t1 - t0) * gpus
            in_window[kind] += max(0.0, min(t1, horizon) - max(t0, 0.0)) * gpus
        busy_window = sum(in_window.values())
        waits = {}
        for i, job in enumerate(jobs):
            waits.setdefault(job.priority, []).append(self.first_start[i] - job.arrival)
        per_class = {}
        for name, cls in sorted(self.classes.items(), key=lambda kv: kv[1].rank):
            values = sorted(waits.get(name, []))
            if not values:
                continue
            target = cls.max_wait_s
            per_class[name] = {
                "jobs": len(values), "mean_s": sum(values) / len(values), "p50_s": percentile(values, 50),
                "p95_s": percentile(values, 95), "max_s": values[-1], "sla_target_s": target,
                "sla_misses": 0 if target is None else sum(1 for w in values if w > target),
                "waits_s": values}
        fitting = [racks for _, nodes, racks in self.placements if nodes <= topo.nodes_per_rack]
        return {
            "policy": self.policy.name, "placement": self.policy.placement, "preemption": self.preemption,
            "jobs": len(jobs), "gpus": topo.gpus, "makespan_s": makespan, "horizon_s": horizon,
            "utilisation": busy_window / capacity if capacity else 0.0,
            "utilisation_makespan": sum(totals.values()) / (topo.gpus * makespan) if makespan else 0.0,
            "goodput": in_window["work"] / capacity if capacity else 0.0,
            "busy_gpu_s": sum(totals.values()), "work_gpu_s": totals["work"], "lost_gpu_s": totals["lost"],
            "restart_gpu_s": totals["restart"], "save_gpu_s": totals["save"], "slowdown_gpu_s": totals["slowdown"],
            "overhead_gpu_s": totals["lost"] + totals["restart"] + totals["save"],
            "preemptions": sum(self.preemptions), "preempted_jobs": sum(1 for p in self.preemptions if p),
            "split_jobs": sum(1 for r in fitting if r > 1) / len(fitting) if fitting else 0.0,
            "multi_rack": (sum(1 for _, _, r in self.placements if r > 1) / len(self.placements)
                           if self.placements else 0.0),
            "wait": per_class,
            "finish_s": {job.id: self.finish[i] for i, job in enumerate(jobs)},
            "start_s": {job.id: self.first_start[i] for i, job in enumerate(jobs)},
        }


def validate_jobs(jobs, topology, classes):
    """ValueError naming the job for anything the simulation cannot run."""
    seen = set()
    for job in jobs:
        name = f"job '{job.id}'"
        if job.id in seen:
            raise ValueError(f"{name}: the id appears twice in the trace")
        seen.add(job.id)
        if isinstance(job.nodes, bool) or not isinstance(job.nodes, int) or job.nodes < 1:
            raise ValueError(f"{name}: nodes must be an integer >= 1, got {job.nodes!r}")
        if job.nodes > topology.nodes:
            raise ValueError(f"{name}: wants {job.nodes} nodes, but the cluster has {topology.nodes} "
                             f"({topology.pods} pods x {topology.racks_per_pod} racks x {topology.nodes_per_rack})")
        if not job.duration > 0:
            raise ValueError(f"{name}: duration must be > 0 s, got {job.duration}")
        if not job.arrival >= 0:
            raise ValueError(f"{name}: arrival must be >= 0 s, got {job.arrival}")
        if job.priority not in classes:
            raise ValueError(f"{name}: priority '{job.priority}' is not one of {', '.join(classes)}")
        for key in ("checkpoint_interval", "checkpoint_cost", "restart_cost"):
            if not getattr(job, key) >= 0:
                raise ValueError(f"{name}: {key} must be >= 0, got {getattr(job, key)}")


def simulate(jobs, topology, policy, classes=DEFAULT_CLASSES, preemption="checkpoint", seed=0, window_s=None,
             span_penalty=0.0):
    """Metrics dict of one policy over a trace (see Simulation)."""
    return Simulation(jobs, topology, policy, classes, preemption, seed, window_s, span_penalty).run()


# --- traces ------------------------------------------------------------------------------------------
def generate_trace(n_jobs, topology, seed=0, load=0.9, size_alpha=1.2, max_nodes=None, median_duration_s=7200.0,
                   duration_sigma=1.0, max_duration_s=48 * 3600.0,
                   mix=(("prod", 0.2), ("research", 0.5), ("best_effort", 0.3)),
                   checkpoint_interval_s=1800.0, checkpoint_cost_s=60.0, restart_cost_s=300.0):
    """A synthetic trace: sizes are powers of two up to max_nodes (default half the cluster) with
    P(s) ~ s^-size_alpha (many small jobs, few huge ones), durations lognormal (median, sigma)
    clipped to [60 s, max_duration_s], classes drawn from `mix`, and Poisson arrivals whose rate
    makes the offered load (node-seconds asked / node-seconds available over the arrival span)
    equal `load`. Deterministic in `seed`."""
    if n_jobs < 1 or load <= 0:
        raise ValueError(f"n_jobs must be >= 1 and load > 0, got {n_jobs} and {load}")
    rng = random.Random(seed)
    top = max_nodes or max(1, topology.nodes // 2)
    sizes = [2 ** k for k in range(int(math.log2(min(top, topology.nodes))) + 1)]
    nodes = rng.choices(sizes, [s ** -size_alpha for s in sizes], k=n_jobs)
    durations = [min(max_duration_s, max(60.0, rng.lognormvariate(math.log(median_duration_s), duration_sigma)))
                 for _ in range(n_jobs)]
    names, weights = zip(*mix)
    classes = rng.choices(names, weights, k=n_jobs)
    rate = load * topology.nodes * n_jobs / sum(n * d for n, d in zip(nodes, durations))
    t, jobs = 0.0, []
    for k in range(n_jobs):
        t += rng.expovariate(rate)
        jobs.append(Job(f"j{k:04d}", round(t, 3), nodes[k], round(durations[k], 3), classes[k], None,
                        checkpoint_interval_s, checkpoint_cost_s, restart_cost_s))
    return jobs


FIELDS = [f.name for f in dataclasses.fields(Job)]


def _parse_bool(text, name):
    value = str(text).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    if value in ("", "none"):
        return None
    raise ValueError(f"{name}: preemptible must be true or false, got '{text}'")


def _job_from_record(record, where):
    unknown = set(record) - set(FIELDS)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} (allowed: {', '.join(FIELDS)})")
    missing = [k for k in ("id", "arrival", "nodes", "duration") if record.get(k) in (None, "")]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    values = {"id": str(record["id"])}
    name = f"{where} (job '{values['id']}')"
    try:
        values["nodes"] = int(record["nodes"])
        for key in ("arrival", "duration", "checkpoint_interval", "checkpoint_cost", "restart_cost"):
            if record.get(key) not in (None, ""):
                values[key] = float(record[key])
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: {e}") from e
    if record.get("priority") not in (None, ""):
        values["priority"] = str(record["priority"])
    if "preemptible" in record:
        values["preemptible"] = (record["preemptible"] if isinstance(record["preemptible"], bool)
                                 else _parse_bool(record["preemptible"], name))
    return Job(**values)


def load_trace(path):
    """Jobs from a CSV (a header row of Job field names) or JSON file (a list of objects, or
    {"jobs": [...]}); id, arrival, nodes, duration are required, times in seconds."""
    with open(path) as f:
        if path.endswith(".json"):
            data = json.load(f)
            records = data["jobs"] if isinstance(data, dict) else data
            return [_job_from_record(r, f"{path} job {k}") for k, r in enumerate(records)]
        return [_job_from_record(r, f"{path} line {k + 2}") for k, r in enumerate(csv.DictReader(f))]


def write_trace(jobs, path):
    """The inverse of load_trace (CSV, or JSON when the name ends in .json)."""
    rows = [dataclasses.asdict(job) for job in jobs]
    with open(path, "w", newline="") as f:
        if path.endswith(".json"):
            json.dump({"jobs": rows}, f, indent=1)
        else:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(rows)


# --- reports ------------------------------------------------------------------------------------------
def _label(result, with_placement):
    return result["policy"] + (f" / {result['placement']}" if with_placement else "")


def table(results):
    """Fixed-width text: a summary row per policy, then wait times (hours) per policy and class."""
    with_placement = len({r["placement"] for r in results}) > 1
    width = max([len(_label(r, with_placement)) for r in results] + [6]) + 2
    lines = [f"{'policy':<{width}}{'util':>7}{'goodput':>9}{'util_ms':>9}{'makespan_h':>12}{'preempt':>9}"
             f"{'lost_gpu_h':>12}{'ovh_gpu_h':>11}{'slow_gpu_h':>12}{'split':>8}{'multi_rack':>12}"]
    for r in results:
        lines.append(f"{_label(r, with_placement):<{width}}{100 * r['utilisation']:>6.1f}%{100 * r['goodput']:>8.1f}%"
                     f"{100 * r['utilisation_makespan']:>8.1f}%{r['makespan_s'] / 3600:>12.1f}{r['preemptions']:>9d}"
                     f"{r['lost_gpu_s'] / 3600:>12.1f}"
                     f"{r['overhead_gpu_s'] / 3600:>11.1f}{r['slowdown_gpu_s'] / 3600:>12.1f}"
                     f"{100 * r['split_jobs']:>7.1f}%{100 * r['multi_rack']:>11.1f}%")
    lines += ["", f"{'wait (h)':<{width}}{'class':<13}{'jobs':>6}{'mean':>8}{'p50':>8}{'p95':>8}{'max':>8}"
              f"{'SLA_h':>7}{'misses':>8}"]
    for r in results:
        for name, w in r["wait"].items():
            target = "-" if w["sla_target_s"] is None else f"{w['sla_target_s'] / 3600:g}"
            lines.append(f"{_label(r, with_placement):<{width}}{name:<13}{w['jobs']:>6d}{w['mean_s'] / 3600:>8.2f}"
                         f"{w['p50_s'] / 3600:>8.2f}{w['p95_s'] / 3600:>8.2f}{w['max_s'] / 3600:>8.2f}{target:>7}"
                         f"{w['sla_misses']:>8d}")
    return "\n".join(lines)


def plot(results, path):
    """A PNG: utilisation and goodput per policy, p95 wait per class and policy, and the CDF of all
    waits per policy. Returns `path`; RuntimeError when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RuntimeError("plot needs matplotlib (pip install matplotlib)") from e
    with_placement = len({r["placement"] for r in results}) > 1
    labels = [_label(r, with_placement) for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    x = range(len(results))
    axes[0].bar([i - 0.2 for i in x], [100 * r["utilisation"] for r in results], 0.4, label="busy")
    axes[0].bar([i + 0.2 for i in x], [100 * r["goodput"] for r in results], 0.4, label="useful work")
    axes[0].set_ylabel("% of GPU time")
    axes[0].set_title("utilisation")
    classes = list(dict.fromkeys(name for r in results for name in r["wait"]))
    step = 0.8 / max(1, len(classes))
    for k, name in enumerate(classes):
        axes[1].bar([i - 0.4 + step * (k + 0.5) for i in x],
                    [r["wait"].get(name, {}).get("p95_s", 0.0) / 3600 for r in results], step, label=name)
    axes[1].set_ylabel("hours")
    axes[1].set_title("p95 wait by class")
    for ax in axes[:2]:
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    for r, label in zip(results, labels):
        waits = sorted(w / 3600 for c in r["wait"].values() for w in c["waits_s"])
        axes[2].step(waits, [(k + 1) / len(waits) for k in range(len(waits))], where="post", label=label)
    axes[2].set_xscale("symlog", linthresh=0.1)
    axes[2].set_xlabel("wait (hours)")
    axes[2].set_ylabel("share of jobs")
    axes[2].set_title("wait CDF")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _json_ready(result):
    return {k: v for k, v in result.items() if k not in ("finish_s", "start_s")}


def build_parser():
    p = argparse.ArgumentParser(prog="python -m myriad.operations.cluster_sim",
                                description="Compare cluster scheduling policies on a job trace "
                                            "(docs/planning.md)")
    p.add_argument("--policies", default="fifo,priority,priority+backfill,priority+backfill+preempt",
                   help="comma list of fifo|priority[+backfill][+preempt]")
    p.add_argument("--placement", default="best_fit", help=f"comma list of {', '.join(PLACEMENTS)}")
    p.add_argument("--jobs", type=int, default=500, help="jobs in the generated trace (default 500)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--load", type=float, default=0.9, help="offered load of the generated trace (default 0.9)")
    p.add_argument("--trace", help="CSV or JSON trace instead of a generated one")
    p.add_argument("--save-trace", help="write the trace used (CSV, or JSON for .json)")
    p.add_argument("--pods", type=int, default=2)
    p.add_argument("--racks-per-pod", type=int, default=4)
    p.add_argument("--nodes-per-rack", type=int, default=16)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--preemption", choices=PREEMPTION_MODES, default="checkpoint",
                   help="checkpoint: the victim saves (checkpoint_cost) and loses nothing; kill: it loses "
                        "the work since its last periodic checkpoint")
    p.add_argument("--span-penalty", type=float, default=0.0,
                   help="slow-down per rack a job spans beyond the fewest it needs, e.g. 0.1 = 10%% (default 0)")
    p.add_argument("--aging-h", type=float, default=0.0, help="priority aging: one class up per this many hours")
    p.add_argument("--window-h", type=float,
                   help="utilisation over [0, this many hours] (default: until the last arrival)")
    p.add_argument("--plot", help="write a PNG chart here")
    p.add_argument("--json", help="write the metrics here")
    return p


def main(argv=None):
    """Command line: prints the comparison table; returns the exit code (2 on bad input)."""
    args = build_parser().parse_args(argv)
    try:
        topology = Topology(args.pods, args.racks_per_pod, args.nodes_per_rack, args.gpus_per_node)
        policies = [Policy.parse(p, placement, args.aging_h * 3600)
                    for placement in args.placement.split(",") for p in args.policies.split(",")]
        jobs = load_trace(args.trace) if args.trace else generate_trace(args.jobs, topology, args.seed, args.load)
        if args.save_trace:
            write_trace(jobs, args.save_trace)
        window = args.window_h * 3600 if args.window_h else None
        results = [simulate(jobs, topology, policy, DEFAULT_CLASSES, args.preemption, args.seed, window,
                            args.span_penalty) for policy in policies]
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{len(jobs)} jobs on {topology.pods} pods x {topology.racks_per_pod} racks x {topology.nodes_per_rack} "
          f"nodes x {topology.gpus_per_node} GPUs ({topology.gpus} GPUs); preemption: {args.preemption}")
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([_json_ready(r) for r in results], f, indent=1)
    if args.plot:
        try:
            print(f"plot: {plot(results, args.plot)}")
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
