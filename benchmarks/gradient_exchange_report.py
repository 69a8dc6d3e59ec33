#!/usr/bin/env python3
"""Gradient exchange report: the main job's model (configs/gpt2_tiny.yaml) trained at dp 4 with
each data-parallel exchange, from the same seed and data, and what each cost and reached.

    python3 benchmarks/gradient_exchange_report.py [--steps 600] [--np 4] [--only NAME,...]

Each variant is a real training run under mpirun (4 ranks, 1 thread each, micro_batch 4 so the
global batch stays the config's 16). From each run's metrics.jsonl it reports: the training loss
at the last step and the mean of the last 20, the last validation loss, the mean bytes each rank
sent per step over the last 96 steps (after 1-bit Adam's freeze step; 6 local-SGD rounds of 16),
the exposed communication share of the step (seconds blocked in wait() / step seconds) and the mean
step time. Nothing is estimated: every number is read from the runs. Prints a markdown table with
the machine and the command lines.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VARIANTS = [
    ("exact (ring)", ["parallel.dp_reduce=ring"]),
    ("hierarchical (NODES nodes x 2)", ["parallel.dp_reduce=hierarchical", "parallel.ranks_per_node=2"]),
    ("1-bit Adam", ["training.optimizer=onebit_adam"]),
    ("int8 + error feedback", ["training.gradient_compression=int8"]),
    ("local SGD (DiLoCo, H = 16)", ["training.sync=local"]),
    ("local SGD, overlapped outer step", ["training.sync=local", "training.outer_overlap=true"]),
]


def run_variant(name, overrides, steps, ranks, out_dir):
    log_dir = os.path.join(out_dir, "".join(c if c.isalnum() else "_" for c in name))
    command = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle",
               "1", "-x", "OMP_NUM_THREADS=1", "-x", "PYTHONPATH=" + os.path.join(ROOT, "python")]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    command += [sys.executable, os.path.join(ROOT, "python", "train.py"), "--config",
                os.path.join(ROOT, "configs", "gpt2_tiny.yaml"), "--log_dir", log_dir,
                "--set", "training.micro_batch=4", "--set", f"training.steps={steps}", "--set", "checkpoint.every=0",
                "--set", "sample.tokens=0"]
    for o in overrides:
        command += ["--set", o]
    start = time.time()
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        sys.exit(f"{name}: training failed (rc {result.returncode}):\n{result.stdout[-3000:]}")
    train, val = [], []
    with open(os.path.join(log_dir, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            (train if record.get("kind") == "train" else val).append(record)
    tail = train[-96:]
    return {
        "name": name,
        "overrides": overrides,
        "loss_last": train[-1]["loss"],
        "loss_mean20": sum(r["loss"] for r in train[-20:]) / 20,
        "val": val[-1]["val_loss"] if val else float("nan"),
        "bytes": sum(r["comm_bytes"] for r in tail) / len(tail),
        "comm_share": sum(r["comm_seconds"] for r in tail) / sum(r["step_seconds"] for r in tail),
        "step_ms": 1000 * sum(r["step_seconds"] for r in tail) / len(tail),
        "wall": time.time() - start,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--only", default="", help="comma-separated prefixes of variant names")
    args = parser.parse_args()
    # The bytes column averages the last 96 steps, which must follow 1-bit Adam's freeze step
    # (auto: max(warmup 30, steps / 5)): 126 steps at least.
    if args.steps < 126:
        parser.error(f"--steps {args.steps}: at least 126, so that the last 96 steps follow 1-bit Adam's freeze step")
    if args.np < 2 or args.np % 2 != 0:
        parser.error(f"--np {args.np}: an even number of ranks >= 2 (data parallelism; the hierarchical run puts 2 "
                     "on each node)")
    variants = [(name.replace("NODES", str(args.np // 2)), overrides) for name, overrides in VARIANTS]
    chosen = [v for v in variants if not args.only or any(v[0].startswith(p) for p in args.only.split(","))]
    if not chosen:
        parser.error(f"--only {args.only!r} names no run; the runs: {', '.join(name for name, _ in variants)}")
    out_dir = tempfile.mkdtemp(prefix="myriad_exchange_")
    print(f"# gradient exchange report\n\n- command: {' '.join(sys.argv)}\n- machine: {platform.node()}, "
          f"{os.cpu_count()} CPUs, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}\n"
          f"- runs: configs/gpt2_tiny.yaml, dp {args.np}, {args.steps} steps, micro_batch 4, seed 1337; "
          f"logs under {out_dir}\n", flush=True)
    rows = [run_variant(name, overrides, args.steps, args.np, out_dir) for name, overrides in chosen]
    base = rows[0]
    print("| run | loss @ last step | mean loss, last 20 | val loss | vs first run | bytes/rank/step (last 96) | "
          "vs first run | exposed comm | ms/step | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {r['loss_last']:.4f} | {r['loss_mean20']:.4f} | {r['val']:.4f} | "
              f"{100 * (r['loss_mean20'] / base['loss_mean20'] - 1):+.2f} % | {r['bytes']:.0f} | "
              f"{r['bytes'] / base['bytes']:.4f} | {100 * r['comm_share']:.1f} % | {r['step_ms']:.0f} | "
              f"{r['wall']:.0f} |")


if __name__ == "__main__":
    main()
