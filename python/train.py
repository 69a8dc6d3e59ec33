#!/usr/bin/env python3
"""myriad training driver, launched under mpirun (one process per rank).

    mpirun -np 1 python3 python/train.py --config configs/gpt2_tiny.yaml [--set training.lr=3e-4 ...]

Thin by design: it parses the config and overrides, builds the C++ Engine and walks the steps,
printing one line per logging step (step, loss, lr, grad norm, tokens/s, ms/step), the
validation loss every training.eval_every steps, checkpoints every checkpoint.every steps and at
the end, and a text sample from the trained model. Everything heavy runs in C++.
"""
import argparse
import os
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


def main(argv):
    args = parse_args(argv)
    rank, world = launcher_rank_and_size()
    import myriad  # noqa: E402  (after argument parsing so --help works without a build)

    try:
        config = myriad.Config.from_file(args.config)
        for override in args.overrides:
            config.set(override)
        if args.resume is not None:
            config.set(f"checkpoint.resume={args.resume}")
        config.validate(world)
        if world > 1:
            raise myriad.Error(f"world size {world}: data parallelism arrives with the data-parallel issue; "
                               f"launch with mpirun -np 1 for now")
        os.makedirs(config.logging_dir, exist_ok=True)
        with open(os.path.join(config.logging_dir, "config.yaml"), "w") as f:
            f.write(config.resolved().to_yaml())
        engine = myriad.Engine(config, rank, os.path.join(config.logging_dir, f"rank{rank}.log"))
        if config.resume:
            engine.load(config.resume)
    except myriad.Error as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2

    steps, every = config.steps, config.logging_every
    mem = engine.memory_report()
    if rank == 0:
        print(f"[rank 0] training {steps} steps, {engine.tokens_per_step} tokens/step; memory: "
              f"params {mem['parameters'] / 2**20:.1f} MiB, grads {mem['gradients'] / 2**20:.1f} MiB, "
              f"optimizer {mem['optimizer'] / 2**20:.1f} MiB, activations {mem['activations'] / 2**20:.1f} MiB",
              flush=True)
    progress = Progress(steps, rank == 0)
    window_tokens, window_time, window_steps = 0, 0.0, 0
    while engine.step_count < steps:
        m = engine.step()
        window_tokens += m["tokens"]
        window_time += m["seconds"]
        window_steps += 1
        step = m["step"]
        if rank == 0 and (step % every == 0 or step == steps or step == 1):
            progress.clear()
            print(f"step {step:5d}/{steps} | loss {m['loss']:.4f} | lr {m['lr']:.2e} | grad_norm {m['grad_norm']:.3f} | "
                  f"tok/s {human(window_tokens / max(window_time, 1e-9))} | "
                  f"{1000 * window_time / max(1, window_steps):.0f} ms/step"
                  + (" | SKIPPED (non-finite grads)" if m["skipped"] else ""), flush=True)
            window_tokens, window_time, window_steps = 0, 0.0, 0
        if config.eval_every and step % config.eval_every == 0 and rank == 0:
            progress.clear()
            print(f"step {step:5d}/{steps} | val loss {engine.evaluate():.4f}", flush=True)
        if config.checkpoint_every and step % config.checkpoint_every == 0 and step < steps:
            engine.save()
        progress.update(step, f"loss {m['loss']:.3f}")
    progress.clear()
    if rank == 0:
        print(f"final | val loss {engine.evaluate():.4f}", flush=True)
    path = engine.save()
    if rank == 0:
        print(f"[rank 0] checkpoint: {path}", flush=True)
    sample = config.sample
    if rank == 0 and sample["tokens"] > 0:
        text = engine.generate(sample["prompt"], sample["tokens"], sample["temperature"], sample["top_k"], config.seed)
        print("---- sample ----")
        print(text)
        print("----------------", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
