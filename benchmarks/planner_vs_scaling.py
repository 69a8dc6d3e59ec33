"""planner_vs_scaling: the planner's predicted step time against bench_scaling's measured one.

For bench_scaling's model and batch (benchmarks/bench_scaling.cpp: GPT-2 style L 8, H 8, C 256, T 128,
V 512, global batch 16, micro-batch 2, fp32, AdamW, ZeRO 0, no recompute) and each layout it ran
(dp x tp x pp, +sp, interleaved v2), the planner's step_time on hardware_from("cpu_host",
profile=...) is compared with the measured step time parsed from bench_scaling's Markdown table.

    PYTHONPATH=python python3 benchmarks/planner_vs_scaling.py --profile build/machine_profile.json \
        --scaling runs/scaling_2.md runs/scaling_4.md [--run 2,4] [--markdown out.md]

--run N,M runs bench_scaling under mpirun at those rank counts first and saves its output where
--scaling names it (N runs, N files). Several files may hold the same layout (repeated runs: this
host's speed drifts by +-25 % over minutes): its measured time is then the median over the runs,
and the table shows the runs' range. Columns: layout, ranks, measured s, predicted s (the planner:
time-shared cores, Hardware.rank_share), predicted by the plain rate-share rule (every rate times
the share, the schedule's bubble kept), ratio predicted / measured, within 25 %.
Invariants: no number is invented: measured = bench_scaling's table, predicted = step_time of the profile.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import tempfile

from myriad.planner.hardware import Hardware, Rate, hardware_from, load_profile
from myriad.planner.layout import read_config
from myriad.planner.step_time import step_time

MODEL_YAML = """# bench_scaling's model and batch (benchmarks/bench_scaling.cpp constants)
model:
  architecture: gpt2
  vocab_size: 512
  n_layer: 8
  n_head: 8
  n_embd: 256
  context_length: 128
training:
  seq_len: 128
  micro_batch: 2
  gradient_accumulation: 1
"""
GLOBAL_BATCH, MICRO_BATCH = 16, 2
BAR = 0.25
ROW = re.compile(r"^\|\s*(dp(\d+) tp(\d+) pp(\d+)( \+sp)?( interleaved v(\d+))?)\s*\|\s*([\d.]+)\s*\|")


@dataclasses.dataclass(frozen=True)
class Measured:
    layout: str  # bench_scaling's name: "dp2 tp1 pp2 interleaved v2"
    dp: int
    tp: int
    pp: int
    sp: bool
    virtual_stages: int
    step_s: float
    runs: int = 1  # bench_scaling runs the step time is the median of
    low_s: float = 0.0  # the fastest and slowest of those runs (0: one run)
    high_s: float = 0.0

    @property
    def ranks(self) -> int:
        return self.dp * self.tp * self.pp


def parse_scaling(text: str) -> list:
    """The rows of bench_scaling's table (layout and step ms)."""
    out = []
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            out.append(Measured(layout=m.group(1), dp=int(m.group(2)), tp=int(m.group(3)), pp=int(m.group(4)),
                                sp=bool(m.group(5)), virtual_stages=int(m.group(7) or 1),
                                step_s=float(m.group(8)) / 1e3))
    return out


def median_of_runs(rows) -> list:
    """One row per layout, in first-seen order: the median step time over its runs, with their range."""
    by_layout = {}
    for row in rows:
        by_layout.setdefault(row.layout, []).append(row)
    out = []
    for runs in by_layout.values():
        times = sorted(r.step_s for r in runs)
        mid = len(times) // 2
        median = times[mid] if len(times) % 2 else 0.5 * (times[mid - 1] + times[mid])
        out.append(dataclasses.replace(runs[0], step_s=median, runs=len(times), low_s=times[0], high_s=times[-1]))
    return out


def overrides(row: Measured) -> list:
    accumulation = GLOBAL_BATCH // (MICRO_BATCH * row.dp)
    items = [f"parallel.dp={row.dp}", f"parallel.tp={row.tp}", f"parallel.pp={row.pp}",
             f"parallel.sequence_parallel={'true' if row.sp else 'false'}",
             f"training.gradient_accumulation={accumulation}"]
    if row.virtual_stages > 1:
        items += ["parallel.pp_schedule=interleaved", f"parallel.virtual_stages={row.virtual_stages}"]
    return items


def rate_share_only(hw: Hardware, ranks: int) -> Hardware:
    """The plain rule: every rate times the share, no time-sharing of the bubble (cores unset)."""
    share = hw.rank_share(min(ranks, hw.gpus_per_node))
    scaled = {key: dataclasses.replace(getattr(hw, key), measured=getattr(hw, key).measured * share)
              for key in ("matmul", "attention", "memory", "activation", "optimizer")
              if isinstance(getattr(hw, key), Rate)}
    scaled["matmul_by_tp"] = tuple((tp, dataclasses.replace(rate, measured=rate.measured * share))
                                   for tp, rate in hw.matmul_by_tp)
    return dataclasses.replace(hw, cores=0, **scaled)


def predict(rows, profile) -> list:
    """One dict per measured row: layout, ranks, measured, predicted (planner), predicted (rate share only),
    ratio, within the bar, and the planner's split (compute, exposed comm, bubble, optimizer)."""
    hw = hardware_from("cpu_host", profile=profile)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench_scaling_model.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(MODEL_YAML)
        for row in rows:
            inp = read_config(path, world=row.ranks, overrides=overrides(row))
            st = step_time(inp, hw)
            plain = step_time(inp, rate_share_only(hw, row.ranks))
            ratio = st.total_s / row.step_s
            out.append({"layout": row.layout, "ranks": row.ranks, "measured_s": row.step_s, "runs": row.runs,
                        "low_s": row.low_s, "high_s": row.high_s,
                        "predicted_s": st.total_s, "plain_s": plain.total_s, "ratio": ratio,
                        "within": abs(ratio - 1.0) <= BAR, "compute_s": st.compute_s,
                        "comm_s": st.exposed_comm_total_s, "bubble_s": st.bubble_s, "optimizer_s": st.optimizer_s,
                        "by_class": dict(st.compute_by_class_s)})
    return out


def table(results) -> str:
    lines = ["| layout | ranks | measured s | predicted s | ratio | within 25%? | planner: compute / comm / bubble "
             "/ optimizer s | rate-share-only s (ratio) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        measured = f"{r['measured_s']:.3f}"
        if r.get("runs", 1) > 1:
            measured += f" ({r['runs']} runs: {r['low_s']:.3f}–{r['high_s']:.3f})"
        lines.append(f"| {r['layout']} | {r['ranks']} | {measured} | {r['predicted_s']:.3f} | "
                     f"{r['ratio']:.2f} | {'yes' if r['within'] else 'NO'} | {r['compute_s']:.3f} / "
                     f"{r['comm_s']:.3f} / {r['bubble_s']:.3f} / {r['optimizer_s']:.3f} | "
                     f"{r['plain_s']:.3f} ({r['plain_s'] / r['measured_s']:.2f}) |")
    return "\n".join(lines)


def run_scaling(ranks: int, out_path: str, build: str) -> None:
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-x",
           "OMP_NUM_THREADS=1", "-np", str(ranks), os.path.join(build, "benchmarks", "bench_scaling")]
    print("running:", " ".join(cmd), file=sys.stderr)
    result = subprocess.run(cmd, check=True, capture_output=True, text=True)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(result.stdout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="machine profile (scripts/calibrate.sh)")
    ap.add_argument("--scaling", nargs="+", required=True, help="bench_scaling outputs (Markdown)")
    ap.add_argument("--run", default="", help="rank counts to run bench_scaling at first (one per --scaling file)")
    ap.add_argument("--build", default="build")
    ap.add_argument("--markdown", default="", help="also write the table here")
    args = ap.parse_args(argv)
    if args.run:
        counts = [int(x) for x in args.run.split(",")]
        if len(counts) != len(args.scaling):
            ap.error("--run needs one --scaling file per rank count")
        for n, path in zip(counts, args.scaling):
            run_scaling(n, path, args.build)
    rows = []
    for path in args.scaling:
        with open(path, encoding="utf-8") as f:
            rows += parse_scaling(f.read())
    if not rows:
        ap.error("no bench_scaling rows found in " + ", ".join(args.scaling))
    rows = median_of_runs(rows)
    prof = load_profile(args.profile)
    results = predict(rows, prof)
    text = table(results)
    met = sum(r["within"] for r in results)
    summary = (f"\nprofile: {args.profile} ({prof['machine']}, {prof['date']}); cores {prof.get('cores', '?')}, "
               f"threads {prof.get('threads', 1)}\nwithin 25 %: {met} of {len(results)} layouts")
    print(text + summary)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text + "\n" + summary + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
