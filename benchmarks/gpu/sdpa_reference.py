"""PyTorch scaled_dot_product_attention timings on the shapes of bench_attention_gpu (bf16, same
batch x heads x T, causal and not), for the ratio column of that benchmark. Writes lines
"T D causal forward_seconds forward_backward_seconds" to the file given (best of 2 rounds of 3
calls, CUDA events). Exits 0 with a note when PyTorch or a GPU is missing.
Usage: python3 benchmarks/gpu/sdpa_reference.py sdpa.txt [--long]"""
import sys


def main(path, long_sequences=False):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("sdpa_reference: PyTorch not installed")
        return 0
    if not torch.cuda.is_available():
        print("sdpa_reference: no CUDA device")
        return 0

    def best(fn):
        fn()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(2):
            start.record()
            for _ in range(3):
                fn()
            stop.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(stop) / 1e3 / 3)
        return min(times)

    lines = []
    for t in (1024, 2048, 4096, 8192, 16384) if long_sequences else (1024, 2048, 4096):
        for d in (64, 128):
            for causal in (1, 0):
                heads, batch = 16, max(1, 16384 // t)
                q, k, v = (torch.randn(batch, heads, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                           for _ in range(3))
                grad = torch.randn_like(q)
                def forward(q=q, k=k, v=v, causal=causal):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))

                def both(forward=forward, grad=grad):
                    out = forward()
                    out.backward(grad)

                lines.append(f"{t} {d} {causal} {best(forward):.9f} {best(both):.9f}")
                print(lines[-1], flush=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], "--long" in sys.argv[2:]))
