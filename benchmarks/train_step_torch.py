"""train_step_torch: PyTorch eager's training step of a GPT-2 or LLaMA-style model on the CPU, the reference
bench_train_step compares myriad's step with (`bench_train_step --reference torch` runs this script between
its own timed rounds, alternated, and prints the ratio).

The model is benchmarks/torch_transformer.py's transformer with the knobs of nn::TransformerConfig
(--norm, --mlp, --positions, --kv-heads, --ffn, --bias, --tie, --norm-eps, --rope-theta,
--init-std; the defaults are GPT-2's: LayerNorm, tanh GELU, learned positions, biases, the LM head
tied to the token embedding), causal attention through torch's scaled_dot_product_attention, no
dropout, in float32 on the CPU; the step the same as bench_train_step's:
zero the gradients, forward + backward of the mean cross-entropy over random targets, clip the
gradient norm to 1.0, one AdamW update (lr 6e-4, betas 0.9 / 0.95, eps 1e-8, weight decay 0.1 on
the matrices: AdamWConfig's defaults).
`--adamw fused` uses torch's fused AdamW kernel, `default` torch's default (foreach) implementation.

    python3 benchmarks/train_step_torch.py --vocab 50257 --layers 12 --heads 12 --embd 768 --block 1024 \\
        --batch 4 --seq 64 --steps 3 --adamw fused

prints one JSON line: {"median_ms": ..., "min_ms": ..., "steps": N, "loss_first": ..., "loss_last": ...,
"torch": version, "threads": torch.get_num_threads(), "adamw": ..., "params": N} (params: the model's
parameter count, which bench_train_step checks against myriad's). Exit 3 when torch is not
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_transformer import TransformerSpec, build_transformer  # noqa: E402  (the benchmarks' one model)


def main(argv=None):
    parser = argparse.ArgumentParser(description="PyTorch eager GPT-2 CPU training step (bench_train_step's reference)")
    for name, default in (("vocab", 50257), ("layers", 12), ("heads", 12), ("embd", 768), ("block", 1024),
                          ("batch", 4), ("seq", 64), ("steps", 3)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--kv-heads", type=int, default=0, help="key/value heads (0 = --heads)")
    parser.add_argument("--ffn", type=int, default=0, help="MLP hidden width (0 = 4 x --embd)")
    parser.add_argument("--norm", choices=("layernorm", "rmsnorm"), default="layernorm")
    parser.add_argument("--mlp", choices=("gelu", "swiglu"), default="gelu")
    parser.add_argument("--positions", choices=("learned", "rope"), default="learned")
    parser.add_argument("--bias", type=int, choices=(0, 1), default=1)
    parser.add_argument("--tie", type=int, choices=(0, 1), default=1)
    parser.add_argument("--norm-eps", type=float, default=1e-5)
    parser.add_argument("--rope-theta", type=float, default=10000.0)
    parser.add_argument("--init-std", type=float, default=0.02)
    parser.add_argument("--adamw", choices=("fused", "default"), default="fused")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("train_step_torch: torch is not installed", file=sys.stderr)
        return 3
    torch.manual_seed(0)
    spec = TransformerSpec(vocab=args.vocab, layers=args.layers, heads=args.heads, channels=args.embd, block=args.block,
                           kv_heads=args.kv_heads, ffn=args.ffn, norm=args.norm, mlp=args.mlp,
                           positions=args.positions, bias=bool(args.bias), tie=bool(args.tie), norm_eps=args.norm_eps,
                           rope_theta=args.rope_theta, init_std=args.init_std)
    model = build_transformer(torch, spec)
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
                      "threads": torch.get_num_threads(), "adamw": args.adamw,
                      "params": sum(p.numel() for p in model.parameters())}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
