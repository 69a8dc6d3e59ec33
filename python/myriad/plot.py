"""Charts of a run: ``python -m myriad.plot RUN_DIR [--out DIR]``.

Reads RUN_DIR/metrics.jsonl (written by rank 0, schema in docs/metrics.md) and writes PNG files
(into RUN_DIR/plots by default): loss.png (train and validation loss), throughput.png (tokens/s),
mfu.png (MFU over the measured and the datasheet peak), comm.png (exposed communication share
by axis, data-loader wait and pipeline bubble), step_time_per_rank.png (each rank's compute time
per step from the straggler checks), memory.png (resident memory) and, for training.device cuda
runs with the driver's NVML, gpu.png (GPU Util, Memory BW, Pcie BW). Prints the files written.
"""
import argparse
import json
import os
import sys

AXES = ("tp", "cp", "ep", "dp", "pp")


def read_metrics(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        raise SystemExit(f"error: {path} not found (is logging.jsonl on, and is this a run directory?)")
    train, evals = [], []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"error: {path}:{number}: not JSON ({e})") from None
            (evals if record.get("kind") == "eval" else train).append(record)
    if not train:
        raise SystemExit(f"error: {path} has no training steps")
    return train, evals


def plot_run(run_dir, out_dir=None):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("error: myriad.plot needs matplotlib "
                         "(pip install matplotlib; scripts/setup.sh installs it)") from None
    train, evals = read_metrics(run_dir)
    out_dir = out_dir or os.path.join(run_dir, "plots")
    os.makedirs(out_dir, exist_ok=True)
    steps = [r["step"] for r in train]
    written = []

    def save(fig, name, title, ylabel):
        ax = fig.axes[0]
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        path = os.path.join(out_dir, name)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, [r["loss"] for r in train], label="train")
    if evals:
        ax.plot([r["step"] for r in evals], [r["val_loss"] for r in evals], "o-", label="validation")
    save(fig, "loss.png", "loss", "cross-entropy (nats/token)")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, [r["tokens_per_second"] for r in train], label="tokens/s")
    save(fig, "throughput.png", "throughput", "tokens / s (global batch)")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, [100 * r["mfu"] for r in train], label="MFU (the run's MFU peak)")
    ax.plot(steps, [100 * r["mfu_datasheet"] for r in train], label="MFU (datasheet peak)")
    save(fig, "mfu.png", "model FLOPs utilisation", "%")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    series = [[100 * r["comm_axis_share"][a] for r in train] for a in AXES]
    series.append([100 * r["data_wait_share"] for r in train])
    series.append([100 * r["bubble_share"] for r in train])
    ax.stackplot(steps, *series, labels=[f"comm {a}" for a in AXES] + ["data wait", "pipeline bubble"])
    save(fig, "comm.png", "time not spent computing (share of the step)", "% of step time")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    checks = [r for r in train if r.get("rank_compute_seconds")]
    if checks:
        ranks = len(checks[0]["rank_compute_seconds"])
        for rank in range(ranks):
            ax.plot([r["step"] for r in checks], [1000 * r["rank_compute_seconds"][rank] for r in checks], "o-",
                    label=f"rank {rank}" if ranks <= 16 else None)
    else:
        ax.plot(steps, [1000 * r["compute_seconds"] for r in train], label="rank 0")
    save(fig, "step_time_per_rank.png", "compute time per step, by rank", "ms")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, [r["memory"]["rss_current"] / 2**20 for r in train], label="resident (current)")
    ax.plot(steps, [r["memory"]["rss_peak"] / 2**20 for r in train], label="resident (peak)")
    save(fig, "memory.png", "memory of rank 0", "MiB")

    gpu = [r for r in train if r.get("gpu")]
    if gpu:  # training.device cuda with NVML: the monitoring line's GPU fields
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for key, label in (("utilization", "GPU Util"), ("memory_bw", "Memory BW"), ("pcie_bw", "Pcie BW")):
            points = [(r["step"], 100 * r["gpu"][key]) for r in gpu if r["gpu"].get(key) is not None]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], label=label)
        save(fig, "gpu.png", "GPU of rank 0 (NVML, mean over each step)", "%")
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m myriad.plot", description="PNG charts of a myriad run")
    parser.add_argument("run_dir", help="the run's logging.dir (holds metrics.jsonl)")
    parser.add_argument("--out", default=None, help="output folder (default RUN_DIR/plots)")
    args = parser.parse_args(argv)
    for path in plot_run(args.run_dir, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
