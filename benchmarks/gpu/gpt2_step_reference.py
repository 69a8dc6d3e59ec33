"""PyTorch reference for the GPT-2 124M training-step benchmark (the bar: myriad's CUDA step
must reach at least this tokens/s). The model is written out here (no downloaded weights, no
Hugging Face): GPT-2 small — 12 layers, 12 heads, C 768, vocabulary 50257 padded to 50304,
learned positions, pre-LayerNorm blocks, GELU (tanh) MLP, tied embeddings — trained with bf16
autocast, PyTorch's flash SDPA, fused AdamW (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on
matrices), gradient clipping at 1.0, on random tokens (the step's cost does not depend on them).

MFU uses the same FLOP count as myriad's GptModel::flops_per_token: 6 x (matrix parameters +
tied head) + 6 x L x T x C for causal attention, over the datasheet bf16 dense peak (H100/H200 SXM
989 TFLOP/s; --peak-tflops to change).

Prints one table and writes "tokens_per_second mfu step_seconds" to the output file when given.
Exits 0 with a note when PyTorch or a GPU is missing.
Usage: python3 benchmarks/gpu/gpt2_step_reference.py [out.txt] [--batch 16] [--seq 1024] [--steps 20]
       [--compile] [--layers 12] [--peak-tflops 989]
"""
import argparse
import os
import sys
import time


def build_model(torch, layers, heads, channels, vocab, block):
    """GPT-2 of benchmarks/torch_transformer.py (the one PyTorch transformer the benchmarks use)."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from torch_transformer import TransformerSpec, build_transformer

    return build_transformer(torch, TransformerSpec(vocab=vocab, layers=layers, heads=heads, channels=channels,
                                                    block=block))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("gpt2_step_reference: PyTorch not installed")
        return 0
    if not torch.cuda.is_available():
        print("gpt2_step_reference: no CUDA device")
        return 0

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    channels, heads, vocab, real_vocab = 768, 12, 50304, 50257
    model = build_model(torch, args.layers, heads, channels, vocab, max(1024, args.seq)).cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if args.compile else model
    ids = torch.randint(0, real_vocab, (args.batch, args.seq), device="cuda")
    targets = torch.randint(0, real_vocab, (args.batch, args.seq), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.steps

    matrices = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith("wpe"))
    head = real_vocab * channels  # tied: wte is counted once above as the head's matrix
    flops_per_token = 6.0 * (matrices - vocab * channels + head) + 6.0 * args.layers * args.seq * channels
    tokens = args.batch * args.seq
    tokens_per_second = tokens / seconds
    mfu = flops_per_token * tokens_per_second / (args.peak_tflops * 1e12)
    name = torch.cuda.get_device_name()
    print(f"gpt2_step_reference on {name}, torch {torch.__version__}, compile={args.compile}")
    print("| model | B x T | step (ms) | tokens/s | MFU | loss |")
    print(f"| GPT-2 {args.layers}L C768 (PyTorch, bf16 autocast) | {args.batch} x {args.seq} | "
          f"{seconds * 1e3:.1f} | {tokens_per_second:,.0f} | {100 * mfu:.1f}% | {loss.item():.3f} |")
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"{tokens_per_second:.1f} {mfu:.5f} {seconds:.6f}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
