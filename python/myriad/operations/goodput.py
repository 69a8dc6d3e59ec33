"""Goodput under failures: how much of a training job's wall time is useful work, at a given cluster size and
checkpoint interval, and which interval is best — ``python -m myriad.operations.goodput``.

Model (docs/planning.md, "Goodput: failures and checkpoint interval", states it in full):

- Each GPU fails independently with exponentially distributed lifetimes of mean ``mtbf_hours``, so the whole job
  is interrupted at rate ``lam = gpus / MTBF`` (system MTBF ``M = MTBF / gpus``), at every moment: during work,
  during a checkpoint save and during recovery.
- The job is ``W`` seconds of useful work cut into segments: ``tau`` seconds of work, then a blocking save of
  ``delta`` seconds (the last segment holds the remainder of ``W`` and also ends with a save). A checkpoint
  counts only once its save has completed.
- A failure throws away everything since the segment began (work and the part of the save done) and costs a
  recovery of ``R = detect + restart + load`` seconds; a failure during recovery starts the recovery over.
- Expected wall time of one segment of length ``s = tau + delta`` is then exactly
  ``e^(lam R) (e^(lam s) - 1) / lam`` (Daly 2006's complete cost model); `expected` sums it over the segments and
  splits it into saves, lost work and recovery. `simulate` plays the same model event by event with a seeded
  ``random.Random`` (no global RNG state), so the two agree in expectation: the tests hold them to each other.
- Young's interval ``sqrt(2 delta M)``, Daly's higher-order one and the model's exact optimum for a long job
  (``M (1 + W0(-e^(-1 - delta/M)))``, Lambert W) are compared with the intervals found by searching the model
  and the simulator.

Not modelled: a background (async) write that is still in flight when a failure strikes (the model counts a
checkpoint once its blocking part is done: valid when the write is much shorter than the interval), shared
filesystem bandwidth limits at scale, failures correlated across GPUs, spare nodes.

Pure Python (standard library; matplotlib only for ``--plot``). Never imports the compiled extension.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import numbers
import random
import statistics
import sys

# Meta's Llama 3 paper (2024): 419 unexpected interruptions in a 54-day snapshot of pre-training on 16,384 H100
# GPUs. Counting every cause (GPU, HBM, network, host) against the GPUs gives a per-GPU MTBF of about 50,700 h.
LLAMA3_GPU_MTBF_HOURS = 16384 * 54 * 24 / 419

# docs/performance.md, `bench_checkpoint`: GPT-2 124M (124.5M parameters x 12 bytes: f32 weights + AdamW m, v
# = 1.39 GiB) on a 2-vCPU VM. Synchronous save (snapshot + write + fsync + rename) 5.57 s; asynchronous stall
# (snapshot + hand-over to the writer thread) 0.20 s. Loading was not measured: assumed equal to the sync save.
BENCH_STATE_BYTES = 124.5e6 * 12
BENCH_SYNC_SAVE_S = 5.57
BENCH_ASYNC_STALL_S = 0.20

DEFAULT_GPUS = (1024, 4096, 10240, 16384)


def checkpoint_bytes_per_rank(params, shards=1, bytes_per_param=12):
    """Bytes of checkpoint state one rank writes: ``params`` parameter elements split evenly over ``shards`` ranks
    (tp x pp, times dp at ZeRO >= 1), ``bytes_per_param`` each (12: f32 weight + AdamW m and v, as myriad saves)."""
    if params <= 0:
        raise ValueError(f"params must be > 0, got {params}")
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    if bytes_per_param <= 0:
        raise ValueError(f"bytes_per_param must be > 0, got {bytes_per_param}")
    return params * bytes_per_param / shards


def scale_stall(bytes_per_rank, measured_s=BENCH_SYNC_SAVE_S, measured_bytes=BENCH_STATE_BYTES):
    """A save (or stall, or load) time scaled linearly from a measurement: ``measured_s`` for ``measured_bytes``
    on one rank → seconds for ``bytes_per_rank``. Assumes every rank has the measured machine's copy and disk
    bandwidth to itself (no shared-filesystem limit); pass ``BENCH_ASYNC_STALL_S`` for the async stall."""
    if bytes_per_rank < 0:
        raise ValueError(f"bytes_per_rank must be >= 0, got {bytes_per_rank}")
    if measured_s < 0 or measured_bytes <= 0:
        raise ValueError(f"measured_s must be >= 0 and measured_bytes > 0, got {measured_s}, {measured_bytes}")
    return measured_s * bytes_per_rank / measured_bytes


def _check(name, value, low=0.0, strict=False, finite=True):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if math.isnan(value) or (finite and math.isinf(value)):
        raise ValueError(f"{name} must be finite, got {value}")
    if value < low or (strict and value == low):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {low:g}, got {value}")


@dataclasses.dataclass(frozen=True)
class GoodputInputs:
    """One job on one cluster. Times in seconds unless the name says hours."""
    gpus: int = 16384
    mtbf_hours: float = LLAMA3_GPU_MTBF_HOURS  # per GPU, all causes; math.inf = never fails
    detect_s: float = 600.0  # failure → job known dead: the collective watchdog's default timeout (a hang)
    restart_s: float = 300.0  # reschedule + process start + engine init (assumed; not measured here)
    save_s: float = BENCH_SYNC_SAVE_S  # blocking part of one checkpoint save
    load_s: float = BENCH_SYNC_SAVE_S  # reading the checkpoint back on restart
    interval_s: float | None = None  # work between saves; None = Daly's interval
    job_hours: float = 720.0  # useful training wanted
    step_s: float | None = None  # when set, the interval is rounded to whole steps (at least one)

    def __post_init__(self):
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, numbers.Integral) or self.gpus < 1:
            raise ValueError(f"gpus must be an integer >= 1, got {self.gpus!r}")
        _check("mtbf_hours", self.mtbf_hours, strict=True, finite=False)
        for name in ("detect_s", "restart_s", "save_s", "load_s"):
            _check(name, getattr(self, name))
        _check("job_hours", self.job_hours, strict=True)
        if self.interval_s is not None:
            _check("interval_s", self.interval_s, strict=True)
        if self.step_s is not None:
            _check("step_s", self.step_s, strict=True)

    @property
    def failure_rate(self):
        """Job interruptions per second (0 when the GPUs never fail)."""
        return 0.0 if math.isinf(self.mtbf_hours) else self.gpus / (self.mtbf_hours * 3600.0)

    @property
    def system_mtbf_s(self):
        return math.inf if math.isinf(self.mtbf_hours) else self.mtbf_hours * 3600.0 / self.gpus

    @property
    def recovery_s(self):
        return self.detect_s + self.restart_s + self.load_s

    @property
    def work_s(self):
        return self.job_hours * 3600.0

    def interval(self):
        """The interval the job runs: ``interval_s`` (Daly's when None), rounded to whole steps when step_s is set."""
        tau = self.interval_s if self.interval_s is not None else daly_interval(self.save_s, self.system_mtbf_s)
        if self.step_s is not None:
            tau = max(1, round(tau / self.step_s)) * self.step_s
        if tau <= 0:
            raise ValueError("save_s = 0 makes the best interval 0: give step_s (save every step) or interval_s")
        return tau

    def with_interval(self, interval_s):
        return dataclasses.replace(self, interval_s=interval_s)


def young_interval(save_s, mtbf_s):
    """Young (1974): sqrt(2 delta M), the first-order optimum of work between checkpoints."""
    return math.sqrt(2.0 * save_s * mtbf_s)


def daly_interval(save_s, mtbf_s):
    """Daly (2006): sqrt(2 delta M) [1 + (1/3) sqrt(delta/2M) + (1/9) delta/2M] - delta for delta < 2M, else M."""
    if math.isinf(mtbf_s):
        return math.inf
    if save_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = save_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * save_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - save_s


def exact_interval(save_s, mtbf_s):
    """The model's exact optimum for a job much longer than the interval: minimises (e^((tau + delta)/M) - 1) / tau,
    i.e. tau = M x with (1 - x) e^(x + delta/M) = 1 (= M (1 + W0(-e^(-1 - delta/M)))). Independent of recovery."""
    if math.isinf(mtbf_s):
        return math.inf
    if save_s == 0:
        return 0.0
    c = save_s / mtbf_s

    def h(x):  # (1 - x) e^(x + c) - 1 without cancellation near x = 0; decreasing on (0, 1), h(0) > 0 > h(1)
        return math.expm1(c + x + math.log1p(-x))

    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if h(mid) > 0:
            lo = mid
        else:
            hi = mid
    return mtbf_s * 0.5 * (lo + hi)


def _segments(work_s, tau):
    """(full segments, remainder work) for W seconds cut into intervals of tau; a remainder is one more segment."""
    full = int(work_s // tau) if math.isfinite(tau) else 0
    rest = work_s - full * tau
    if rest <= 1e-9 * work_s:
        rest = 0.0
    return full, rest


def _block(lam, length):
    """Expected time to finish `length` seconds that a failure (rate lam) sends back to their start."""
    return math.expm1(lam * length) / lam if lam > 0 else length


@dataclasses.dataclass(frozen=True)
class Expectation:
    """Exact expectations of the model for one job (seconds unless said)."""
    interval_s: float
    wall_s: float
    save_s: float  # completed saves
    lost_s: float  # work and partial saves thrown away by failures
    recovery_s: float  # detection + restart + load, including recoveries cut short by another failure
    failures: float

    @property
    def useful_s(self):
        return self.wall_s - self.save_s - self.lost_s - self.recovery_s

    @property
    def goodput(self):
        return self.useful_s / self.wall_s

    @property
    def waste_per_failure_s(self):
        return (self.lost_s + self.recovery_s) / self.failures if self.failures > 0 else 0.0


def expected(inputs):
    """The model's exact expected wall time of the job, split into useful work, saves, lost work and recovery."""
    lam, tau, d, rec = inputs.failure_rate, inputs.interval(), inputs.save_s, inputs.recovery_s
    full, rest = _segments(inputs.work_s, tau)
    lengths = [(full, tau + d)] + ([(1, rest + d)] if rest > 0 else [])
    seg_failures = lost = 0.0
    for count, s in lengths:
        failed = math.expm1(lam * s)  # expected failed attempts before the segment completes
        seg_failures += count * failed
        lost += count * (_block(lam, s) - s)  # = failed attempts x mean time into the segment at a failure
    recovery = seg_failures * _block(lam, rec)
    failures = seg_failures * math.exp(lam * rec)  # each recovery phase adds e^(lam R) - 1 failures of its own
    saves = (full + (1 if rest > 0 else 0)) * d
    wall = inputs.work_s + saves + lost + recovery
    return Expectation(tau, wall, saves, lost, recovery, failures)


@dataclasses.dataclass(frozen=True)
class SimRun:
    """One simulated job: the same split as Expectation, for one draw of the failure times."""
    interval_s: float
    wall_s: float
    save_s: float
    lost_s: float
    recovery_s: float
    failures: int
    useful_s: float

    @property
    def goodput(self):
        return self.useful_s / self.wall_s


def simulate(inputs, seed):
    """Plays the job event by event: failures of the whole cluster at rate lam (a Poisson process in wall time,
    drawn from random.Random(seed)); between failures whole segments complete arithmetically, so the cost is
    per failure, not per segment."""
    rng = random.Random(seed)
    lam, tau, d, rec = inputs.failure_rate, inputs.interval(), inputs.save_s, inputs.recovery_s
    full, rest = _segments(inputs.work_s, tau)
    count = full + (1 if rest > 0 else 0)

    def next_failure(now):
        return now + rng.expovariate(lam) if lam > 0 else math.inf

    t = saves = lost = recovering = 0.0
    failures = done = 0
    fail_at = next_failure(0.0)
    while done < count:
        s = tau + d if done < full else rest + d
        if t + s <= fail_at:
            k = 1
            if done < full:  # as many whole segments as end before the next failure
                k = full - done if math.isinf(fail_at) else max(1, min(full - done, int((fail_at - t) // s)))
                while k > 1 and t + k * s > fail_at:
                    k -= 1
            t += k * s
            saves += k * d
            done += k
            continue
        lost += fail_at - t  # the segment's work and the part of its save done are gone
        t = fail_at
        failures += 1
        while True:  # recovery; a failure during it starts it over
            fail_at = next_failure(t)
            if fail_at >= t + rec:
                recovering += rec
                t += rec
                break
            recovering += fail_at - t
            t = fail_at
            failures += 1
    return SimRun(tau, t, saves, lost, recovering, failures, inputs.work_s)


@dataclasses.dataclass(frozen=True)
class SimSummary:
    """Several seeds of one job: means and the spread (sample standard deviation) over the runs."""
    interval_s: float
    runs: tuple

    def mean(self, field):
        return statistics.fmean(getattr(r, field) for r in self.runs)

    def stdev(self, field):
        return statistics.stdev(getattr(r, field) for r in self.runs) if len(self.runs) > 1 else 0.0

    @property
    def wall_s(self):
        return self.mean("wall_s")

    @property
    def goodput(self):
        """Total useful time over total wall time of all runs (the ratio of the means)."""
        return sum(r.useful_s for r in self.runs) / sum(r.wall_s for r in self.runs)

    @property
    def goodput_sd(self):
        return self.stdev("goodput")

    @property
    def failures(self):
        return self.mean("failures")

    @property
    def waste_per_failure_s(self):
        failures = sum(r.failures for r in self.runs)
        return sum(r.lost_s + r.recovery_s for r in self.runs) / failures if failures else 0.0


def simulate_seeds(inputs, seeds):
    """simulate() for each seed (an iterable of ints, or a count meaning 0..count-1)."""
    seeds = range(seeds) if isinstance(seeds, int) else list(seeds)
    runs = tuple(simulate(inputs, s) for s in seeds)
    if not runs:
        raise ValueError("seeds must name at least one seed")
    return SimSummary(runs[0].interval_s, runs)


def _log_grid(lo, hi, points):
    if hi <= lo * (1 + 1e-12):
        return [lo]
    ratio = (hi / lo) ** (1.0 / (points - 1))
    return [lo * ratio**i for i in range(points)]


def _search(cost, inputs, center, span=16.0, points=33, refine=2):
    """Minimises cost(inputs with interval tau) over a log grid of tau in [center/span, center*span] (clipped to
    [one step or a millisecond, the job]), then `refine` times over a finer grid between the best point's
    neighbours. Returns (best effective interval, its cost, every (interval, cost) evaluated)."""
    floor = inputs.step_s if inputs.step_s is not None else 1e-3
    top = inputs.work_s
    if not math.isfinite(center):
        center = top
    center = max(center, floor)  # save_s = 0: the shortest interval
    lo, hi = max(floor, min(center, top) / span), min(top, center * span)
    lo = min(lo, hi)
    seen = {}

    def evaluate(grid):
        for tau in grid:
            eff = inputs.with_interval(tau).interval()
            if eff not in seen:
                seen[eff] = cost(inputs.with_interval(eff))
        return sorted(seen)

    grid = evaluate(_log_grid(lo, hi, points))
    for _ in range(refine):
        best = min(grid, key=seen.get)
        i = grid.index(best)
        a, b = grid[max(0, i - 1)], grid[min(len(grid) - 1, i + 1)]
        grid = evaluate(_log_grid(a, b, 9))
    best = min(seen, key=seen.get)
    return best, seen[best], sorted(seen.items())


def best_interval_model(inputs):
    """The interval minimising the model's expected wall time for this (finite) job: a log-grid search, and the
    intervals W/n that cut the job into n equal segments for the two n around W / exact_interval (the expected
    wall time of n equal segments is convex in n and a remainder segment only adds a save, so one of those two is
    the finite job's optimum when the interval need not be whole steps)."""
    center = exact_interval(inputs.save_s, inputs.system_mtbf_s)
    tau, _, _ = _search(lambda x: expected(x).wall_s, inputs, center, refine=4)
    candidates = {tau}
    if math.isfinite(center) and center > 0:
        n = inputs.work_s / center
        candidates.update(inputs.with_interval(inputs.work_s / k).interval() for k in {max(1, math.floor(n)),
                                                                                         max(1, math.ceil(n))})
    return min(sorted(candidates), key=lambda t: expected(inputs.with_interval(t)).wall_s)


def seeds_for(inputs, seeds, min_failures, max_runs=4000):
    """At least `seeds` runs, and enough of them that the runs hold about `min_failures` failures in all (the
    simulator's best interval is only as sharp as the number of failures behind each mean), but at most
    `max_runs` (a cluster that rarely fails gets a noisy simulated optimum, and a flat goodput curve anyway)."""
    per_run = max(expected(inputs).failures, 1e-9)
    return max(seeds, min(max_runs, math.ceil(min_failures / per_run)))


def best_interval_sim(inputs, seeds=20, min_failures=20000, first_seed=0):
    """The interval minimising the simulator's mean wall time over the same seeds at every candidate (common random
    numbers: the failure times do not depend on the interval). Returns (interval, [(interval, SimSummary)])."""
    n = seeds_for(inputs, seeds, min_failures)
    chosen = range(first_seed, first_seed + n)
    summaries = {}

    def cost(x):
        summary = simulate_seeds(x, chosen)
        summaries[summary.interval_s] = summary
        return summary.wall_s

    center = exact_interval(inputs.save_s, inputs.system_mtbf_s)
    tau, _, _ = _search(cost, inputs, center, span=4.0, points=17, refine=1)
    return tau, sorted(summaries.items())


@dataclasses.dataclass(frozen=True)
class Row:
    """One cluster size of goodput_table()."""
    gpus: int
    system_mtbf_h: float
    young_s: float
    daly_s: float
    exact_s: float  # the model's long-job optimum (Lambert W)
    best_model_s: float
    best_sim_s: float
    goodput_young: float  # model expectations
    goodput_daly: float
    goodput_best_model: float
    goodput_best_sim: float  # simulated, on seeds not used to pick the interval
    goodput_best_sim_sd: float
    wall_h_best_sim: float
    failures: float  # expected over the job at the simulator's best interval
    seeds: int

    def as_dict(self):
        return dataclasses.asdict(self)


def goodput_row(inputs, seeds=20, min_failures=20000, seed=0):
    """Young, Daly and the searched intervals, and the goodput at each, for one cluster."""
    if inputs.save_s == 0 and inputs.step_s is None:
        raise ValueError("save_s = 0 makes every interval formula 0: give step_s (save every step)")
    m = inputs.system_mtbf_s
    young, daly = young_interval(inputs.save_s, m), daly_interval(inputs.save_s, m)
    best_model = best_interval_model(inputs)
    best_sim, _ = best_interval_sim(inputs, seeds, min_failures, first_seed=seed)
    n = seeds_for(inputs.with_interval(best_sim), seeds, min_failures)
    # Goodput at the chosen interval on fresh seeds: the seeds that chose it would flatter it (winner's curse).
    check = simulate_seeds(inputs.with_interval(best_sim), range(seed + 1000003, seed + 1000003 + n))

    def model(tau):
        return expected(inputs.with_interval(max(min(tau, inputs.work_s), inputs.step_s or 0.0)))

    return Row(inputs.gpus, m / 3600.0, young, daly, exact_interval(inputs.save_s, m), best_model, best_sim,
               model(young).goodput, model(daly).goodput, model(best_model).goodput, check.goodput,
               check.goodput_sd, check.wall_s / 3600.0, model(best_sim).failures, n)


def goodput_table(gpus=DEFAULT_GPUS, base=None, seeds=20, min_failures=20000, seed=0):
    """One Row per cluster size in `gpus`, every other input from `base` (GoodputInputs; its gpus and interval
    are ignored)."""
    base = base if base is not None else GoodputInputs()
    return [goodput_row(dataclasses.replace(base, gpus=g, interval_s=None), seeds, min_failures, seed)
            for g in gpus]


def _duration(seconds):
    if not math.isfinite(seconds):
        return "inf"
    if seconds >= 3600 * 10:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def format_table(rows):
    """Fixed-width Markdown table of goodput_table() rows."""
    head = ["GPUs", "system MTBF", "Young", "Daly", "best (model)", "best (sim)", "goodput Young", "goodput Daly",
            "goodput best (sim ± sd)", "wall", "failures"]
    body = [[f"{r.gpus}", f"{r.system_mtbf_h:.2f} h", _duration(r.young_s), _duration(r.daly_s),
             _duration(r.best_model_s), _duration(r.best_sim_s), f"{100 * r.goodput_young:.2f} %",
             f"{100 * r.goodput_daly:.2f} %", f"{100 * r.goodput_best_sim:.2f} ± {100 * r.goodput_best_sim_sd:.2f} %",
             f"{r.wall_h_best_sim / 24:.1f} d", f"{r.failures:.3g}"] for r in rows]
    widths = [max(len(line[i]) for line in [head] + body) for i in range(len(head))]

    def line(cells):
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths)) + " |"

    rule = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(head), rule] + [line(b) for b in body])


def describe(inputs):
    """One paragraph of the inputs a table was made with."""
    return (f"per-GPU MTBF {inputs.mtbf_hours:,.0f} h; detection {inputs.detect_s:g} s, restart {inputs.restart_s:g} s,"
            f" load {inputs.load_s:g} s (recovery {inputs.recovery_s:g} s); save stall {inputs.save_s:g} s; useful"
            f" work {inputs.job_hours:g} h" + (f"; step {inputs.step_s:g} s" if inputs.step_s else ""))


def plot(rows, base, path, seeds=20, min_failures=20000, seed=0):
    """goodput against interval for each cluster size: the model's curve, the simulator's means, Young and Daly."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("error: --plot needs matplotlib (pip install matplotlib)") from None
    fig, ax = plt.subplots(figsize=(8, 5))
    for row in rows:
        inputs = dataclasses.replace(base, gpus=row.gpus, interval_s=None)
        _, sims = best_interval_sim(inputs, seeds, min_failures, first_seed=seed)
        taus = _log_grid(max(1e-3, row.exact_s / 8), min(inputs.work_s, row.exact_s * 8), 80)
        line, = ax.plot(taus, [expected(inputs.with_interval(t)).goodput for t in taus], label=f"{row.gpus} GPUs")
        ax.plot([t for t, _ in sims], [s.goodput for _, s in sims], ".", color=line.get_color())
        ax.axvline(row.young_s, color=line.get_color(), ls=":", lw=0.8)
        ax.axvline(row.daly_s, color=line.get_color(), ls="--", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("checkpoint interval (s of work between saves)")
    ax.set_ylabel("goodput (useful / wall time)")
    ax.set_title("model (lines), simulator (dots), Young (dotted), Daly (dashed)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _gpu_list(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"--gpus takes integers separated by commas, got {text!r}") from err
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"--gpus takes integers >= 1, got {text!r}")
    return values


def main(argv=None):
    defaults = GoodputInputs()
    parser = argparse.ArgumentParser(prog="python -m myriad.operations.goodput",
                                     description="goodput under failures and the best checkpoint interval "
                                                 "(docs/planning.md)")
    parser.add_argument("--gpus", type=_gpu_list, default=list(DEFAULT_GPUS), help="cluster sizes, e.g. 1024,4096")
    parser.add_argument("--mtbf-hours", type=float, default=defaults.mtbf_hours,
                        help="per-GPU mean time between failures, all causes (default: Llama 3's 16,384 GPUs, "
                             "419 interruptions in 54 days: %(default).0f)")
    parser.add_argument("--detect-s", type=float, default=defaults.detect_s,
                        help="failure to job known dead (default %(default)g: the collective watchdog's timeout)")
    parser.add_argument("--restart-s", type=float, default=defaults.restart_s,
                        help="reschedule + process start + engine init (default %(default)g)")
    parser.add_argument("--save-s", type=float, default=None,
                        help=f"blocking part of a save (default {BENCH_SYNC_SAVE_S:g}: bench_checkpoint's synchronous "
                             f"save of 1.39 GiB; its async stall is {BENCH_ASYNC_STALL_S:g})")
    parser.add_argument("--load-s", type=float, default=None,
                        help=f"checkpoint load on restart (default {BENCH_SYNC_SAVE_S:g}, assumed = sync save)")
    parser.add_argument("--state-gib", type=float, default=None,
                        help="checkpoint GiB per rank: scales the bench_checkpoint save and load times linearly")
    parser.add_argument("--async-save", action="store_true",
                        help="with --state-gib: scale the async stall (0.20 s per 1.39 GiB) instead of the sync save")
    parser.add_argument("--job-hours", type=float, default=defaults.job_hours, help="useful training wanted")
    parser.add_argument("--step-s", type=float, default=None, help="step time: round intervals to whole steps")
    parser.add_argument("--seeds", type=int, default=20, help="simulated runs per interval, at least (default 20)")
    parser.add_argument("--min-failures", type=int, default=20000,
                        help="add runs until they hold about this many failures in all (default %(default)d)")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--plot", metavar="PNG", help="write goodput against interval to this file")
    parser.add_argument("--json", metavar="FILE", help="write the inputs and rows as JSON")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    gib_bytes = None if args.state_gib is None else args.state_gib * 2**30
    if args.save_s is None:
        measured = BENCH_ASYNC_STALL_S if args.async_save else BENCH_SYNC_SAVE_S
        args.save_s = measured if gib_bytes is None else scale_stall(gib_bytes, measured)
    if args.load_s is None:
        args.load_s = BENCH_SYNC_SAVE_S if gib_bytes is None else scale_stall(gib_bytes, BENCH_SYNC_SAVE_S)
    try:
        base = GoodputInputs(gpus=1, mtbf_hours=args.mtbf_hours, detect_s=args.detect_s, restart_s=args.restart_s,
                             save_s=args.save_s, load_s=args.load_s, job_hours=args.job_hours, step_s=args.step_s)
        rows = goodput_table(args.gpus, base, args.seeds, args.min_failures, args.seed)
    except ValueError as e:
        parser.error(str(e))
    print(describe(base))
    print(format_table(rows))
    print("goodput Young/Daly: the model's expectation; best (sim): the simulator's interval, its goodput on fresh "
          "seeds (± the spread of single runs)")
    if args.json:
        with open(args.json, "w") as f:
            inputs = dict(dataclasses.asdict(base), gpus=args.gpus, interval_s="per row")
            json.dump({"inputs": inputs, "rows": [r.as_dict() for r in rows]}, f, indent=1)
        print(f"wrote {args.json}")
    if args.plot:
        plot(rows, base, args.plot, args.seeds, args.min_failures, args.seed)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
