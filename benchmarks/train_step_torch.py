"""train_step_torch: PyTorch eager's GPT-2 training step on the CPU, the reference bench_train_step
compares myriad's step with (`bench_train_step --reference torch` runs this script between its own
timed rounds, alternated, and prints the ratio).

The model is benchmarks/gpu/gpt2_step_reference.py's GPT-2 (learned positions, pre-LayerNorm blocks,
tanh GELU, causal attention through torch's scaled_dot_product_attention, the LM head tied to the
token embedding, no dropout), here in float32 on the CPU; the step the same as bench_train_step's:
zero the gradients, forward + backward of the mean cross-entropy over random targets, clip the
gradient norm to 1.0, one AdamW update (lr 6e-4, betas 0.9 / 0.95, eps 1e-8, weight decay 0.1 on
the matrices: AdamWConfig's defaults).
`--adamw fused` uses torch's fused AdamW kernel, `default` torch's default (foreach) implementation.

    python3 benchmarks/train_step_torch.py --vocab 50257 --layers 12 --heads 12 --embd 768 --block 1024 \\
        --batch 4 --seq 64 --steps 3 --adamw fused

prints one JSON line: {"median_ms": ..., "min_ms": ..., "steps": N, "loss_first": ..., "loss_last": ...,
"torch": version, "threads": torch.get_num_threads(), "adamw": ...}. Exit 3 when torch is not
installed (the caller then reports the reference as unavailable). Invariants: one warm-up step is
not timed; the loss after it must be finite; nothing but the step is inside the timed region.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
from gpt2_step_reference import build_model  # noqa: E402  (the GPU benchmark's GPT-2, one definition)


def main(argv=None):
    parser = argparse.ArgumentParser(description="PyTorch eager GPT-2 CPU training step (bench_train_step's reference)")
    for name, default in (("vocab", 50257), ("layers", 12), ("heads", 12), ("embd", 768), ("block", 1024),
                          ("batch", 4), ("seq", 64), ("steps", 3)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--adamw", choices=("fused", "default"), default="fused")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("train_step_torch: torch is not installed", file=sys.stderr)
        return 3
    torch.manual_seed(0)
    model = build_model(torch, args.layers, args.heads, args.embd, args.vocab, args.block)
    decay = [p for p in model.parameters() if p.dim() > 1]
    rest = [p for p in model.parameters() if p.dim() <= 1]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                  lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=args.adamw == "fused")
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=generator)
    targets = torch.randint(0, args.vocab, (args.batch, args.seq), generator=generator)
    losses = []

    def step():
        optimizer.zero_grad(set_to_none=False)
        loss = model(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())

    step()
    if not math.isfinite(losses[0]):
        print(f"train_step_torch: warm-up loss {losses[0]}", file=sys.stderr)
        return 1
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(json.dumps({"median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3, "steps": len(times),
                      "loss_first": losses[0], "loss_last": losses[-1], "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "adamw": args.adamw}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
