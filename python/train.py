#!/usr/bin/env python3
"""myriad training driver, launched under mpirun (one process per rank).

    mpirun -np 2 python3 python/train.py --config configs/gpt2_tiny.yaml --set parallel.dp=2 [--set ...]

Thin by design: it starts MPI (when launched by mpirun with more than one rank), parses the
config and overrides, builds the process groups and the C++ Engine and walks the steps, printing
on rank 0 one line per logging step (step, loss, lr, grad norm, tokens/s, ms/step, exposed
communication share), the validation loss every training.eval_every steps, checkpoints every
checkpoint.every steps and at the end, and a text sample from the trained model. Everything
heavy runs in C++; evaluation, checkpoints and sampling are collective over the ranks.

An error on any rank (bad config, unreadable data, a failure inside a step) prints the message
with the rank and ends every rank of the job (MPI_Abort) instead of leaving the others waiting.

Preemption: SIGTERM or SIGUSR1 on any rank makes every rank stop at the next step boundary (the
ranks agree with one tiny all-reduce per step), write a checkpoint and exit 0; `--resume auto`
continues from it. `python -m myriad.run` restarts a failed job from its newest checkpoint.
Testing aids (first attempt of a supervised run only, MYRIAD_ATTEMPT unset or 0):
MYRIAD_FAULT="kill:rank=R:step=S" makes rank R kill itself (SIGKILL) after step S;
MYRIAD_FAULT="kill_in_save:rank=R:step=S" does so once the background write of the checkpoint of
step S has started its data file (a crash in the middle of a save);
MYRIAD_FAULT="stall:rank=R:step=S:seconds=N" makes rank R sleep N seconds after step S (a hung
rank: the others' collective watchdog reports it and aborts the job).
"""
import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv):
    parser = argparse.ArgumentParser(description="myriad training driver")
    parser.add_argument("--config", required=True, help="YAML run configuration (docs/config.md)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set training.lr=3e-4 (repeatable)")
    parser.add_argument("--resume", default=None, help="'auto' (newest checkpoint) or a checkpoint directory")
    return parser.parse_args(argv)


def launcher_rank_and_size():
    for rank_var, size_var in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                               ("SLURM_PROCID", "SLURM_NTASKS")):
        if rank_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ.get(size_var, "1"))
    return 0, 1


def human(n):
    for unit in ("", "k", "M", "G"):
        if abs(n) < 1000:
            return f"{n:.1f}{unit}"
        n /= 1000.0
    return f"{n:.1f}T"


class Progress:
    """A one-line progress bar on a terminal (redrawn in place); silent when output is a file."""

    def __init__(self, total, enabled):
        self.total, self.enabled, self.start = total, enabled and sys.stderr.isatty(), time.time()

    def update(self, done, text=""):
        if not self.enabled:
            return
        width = 30
        filled = int(width * done / max(self.total, 1))
        elapsed = time.time() - self.start
        eta = elapsed / max(done, 1) * (self.total - done)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} {text} eta {eta:.0f}s ")
        sys.stderr.flush()

    def clear(self):
        if self.enabled:
            sys.stderr.write("\r" + " " * 100 + "\r")


def install_stop_signals():
    """SIGTERM / SIGUSR1 set a flag checked at the next step boundary; returns the flag holder."""
    received = []

    def handler(signum, _frame):
        received.append(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, handler)
    return received


def injected_fault(rank):
    """(kind, step) of the fault this rank injects (MYRIAD_FAULT, first attempt only), else None."""
    spec = os.environ.get("MYRIAD_FAULT", "")
    if not spec or os.environ.get("MYRIAD_ATTEMPT", "0") != "0":
        return None
    kind, *parts = spec.split(":")
    fields = dict(part.split("=", 1) for part in parts)
    if kind not in ("kill", "kill_in_save", "stall") or int(fields.get("rank", -1)) != rank:
        return None
    if kind == "stall":
        return kind, int(fields["step"]), float(fields.get("seconds", 60))
    return kind, int(fields["step"])


def die(rank, why):
    print(f"[rank {rank}] MYRIAD_FAULT: killing this rank {why}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def run(args, rank, world, runtime):
    import myriad

    stop_signals = install_stop_signals()
    fault = injected_fault(rank)

    try:
        config = myriad.Config.from_file(args.config)
        for override in args.overrides:
            config.set(override)
        if args.resume is not None:
            config.set(f"checkpoint.resume={args.resume}")
        config.validate(world)
        os.makedirs(config.logging_dir, exist_ok=True)
        if rank == 0:
            with open(os.path.join(config.logging_dir, "config.yaml"), "w") as f:
                f.write(config.resolved().to_yaml())
        groups = myriad.ProcessGroups(config, runtime)
        engine = myriad.Engine(config, rank, os.path.join(config.logging_dir, f"rank{rank}.log"), groups)
        if config.resume:
            engine.load(config.resume)
    except myriad.Error as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2

    steps, every = config.steps, config.logging_every
    mem = engine.memory_report()
    if rank == 0:
        print(f"[rank 0] training {steps} steps on {world} rank(s), {engine.tokens_per_step} tokens/step; memory per "
              f"rank: params {mem['parameters'] / 2**20:.1f} MiB, grads {mem['gradients'] / 2**20:.1f} MiB, "
              f"optimizer {mem['optimizer'] / 2**20:.1f} MiB, activations {mem['activations'] / 2**20:.1f} MiB",
              flush=True)
    progress = Progress(steps, rank == 0)
    peak = engine.peak_flops["measured"] or engine.peak_flops["datasheet"]
    window_tokens, window_time, window_comm, window_bubble, window_flops, window_steps = 0, 0.0, 0.0, 0.0, 0.0, 0
    while engine.step_count < steps:
        m = engine.step()
        window_tokens += m["tokens"]
        window_time += m["step_seconds"]
        window_flops += m["model_flops"]
        window_comm += m["comm_seconds"]
        window_bubble += m["bubble_seconds"]
        window_steps += 1
        step = m["step"]
        if rank == 0 and (step % every == 0 or step == steps or step == 1):
            progress.clear()
            print(f"step {step:5d}/{steps} | loss {m['loss']:.4f} | lr {m['lr']:.2e} | grad_norm {m['grad_norm']:.3f} | "
                  f"tok/s {human(window_tokens / max(window_time, 1e-9))} | "
                  f"{1000 * window_time / max(1, window_steps):.0f} ms/step | "
                  f"MFU {100 * window_flops / max(window_time, 1e-9) / (world * peak):.1f}% | "
                  f"comm {100 * window_comm / max(window_time, 1e-9):.0f}% | "
                  + (f"bubble {100 * window_bubble / max(window_time, 1e-9):.0f}% | " if window_bubble > 0 else "") +
                  f"mem {m['memory']['rss_current'] / 2**30:.2f} GiB"
                  + (f" | loss scale {m['loss_scale']:g}" if m["loss_scale"] != 1.0 else "")
                  + (" | SKIPPED (non-finite grads)" if m["skipped"] else ""), flush=True)
            window_tokens, window_time, window_comm, window_bubble, window_flops, window_steps = 0, 0.0, 0.0, 0.0, 0.0, 0
        for s in m["stragglers"]:
            if rank == 0:
                print(f"step {step:5d}/{steps} | straggler: rank {s['rank']} ({s['coords']}) on {s['host']}: compute "
                      f"{1000 * s['compute_seconds']:.1f} ms/step vs median {1000 * s['median_seconds']:.1f} ms",
                      flush=True)
        if config.eval_every and step % config.eval_every == 0:
            val = engine.evaluate()
            if rank == 0:
                progress.clear()
                print(f"step {step:5d}/{steps} | val loss {val:.4f}", flush=True)
        if config.checkpoint_every and step % config.checkpoint_every == 0 and step < steps:
            engine.save(background=config.checkpoint_async)
            if fault == ("kill_in_save", step):
                # Wait until the writer has started (its temporary directory exists), so that the
                # kill lands in the middle of the write rather than before it.
                partial = os.path.join(config.checkpoint_dir, f".tmp-step_{step:08d}", f"rank_{rank}.bin")
                deadline = time.time() + 10
                while not os.path.exists(partial) and time.time() < deadline:
                    time.sleep(0.0005)
                die(rank, f"while the checkpoint of step {step} is being written")
        if fault == ("kill", step):
            die(rank, f"after step {step}")
        if fault is not None and fault[:2] == ("stall", step):
            print(f"[rank {rank}] MYRIAD_FAULT: stalling this rank for {fault[2]:.0f} s after step {step}",
                  file=sys.stderr, flush=True)
            time.sleep(fault[2])
        if groups.any(bool(stop_signals)) and step < steps:
            path = engine.save()
            if rank == 0:
                progress.clear()
                cause = stop_signals[0] if stop_signals else "a signal on another rank"
                print(f"preempted by {cause} at step {step}: checkpoint {path}; continue with --resume auto",
                      flush=True)
            del engine, groups
            return 0
        progress.update(step, f"loss {m['loss']:.3f}")
    progress.clear()
    val = engine.evaluate()
    if rank == 0:
        print(f"final | val loss {val:.4f}", flush=True)
    path = engine.save()
    if rank == 0:
        print(f"[rank 0] checkpoint: {path}", flush=True)
    sample = config.sample
    if sample["tokens"] > 0:
        text = engine.generate(sample["prompt"], sample["tokens"], sample["temperature"], sample["top_k"], config.seed)
        if rank == 0:
            print("---- sample ----")
            print(text)
            print("----------------", flush=True)
    del engine, groups
    return 0


def main(argv):
    args = parse_args(argv)
    rank, world = launcher_rank_and_size()
    import myriad  # noqa: E402  (after argument parsing so --help works without a build)

    # MPI first: from here on, a failure on any rank can end all of them.
    runtime = myriad.MpiRuntime() if world > 1 else None
    try:
        code = run(args, rank, world, runtime)
    except BaseException as e:  # noqa: BLE001 — any failure on one rank must not leave the others waiting
        if runtime is None:
            raise
        myriad.MpiRuntime.abort(3, f"{type(e).__name__}: {e}")
    if code != 0 and runtime is not None:
        myriad.MpiRuntime.abort(code, "this rank failed (message above); ending the job")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
