"""bench_serve: load on `myriad serve` — throughput, latency, time to first token, tokens/s and batch
size, with continuous batching against the same model served one request at a time (the ratio is the
batching gain), and against Hugging Face `transformers` generating with the exported model when
torch and transformers are installed (docs/performance.md, "Serving").

    PYTHONPATH=python python3 benchmarks/bench_serve.py [--checkpoint DIR] [--duration 30] [--auth] [--quick]

Without --checkpoint it serves a step-0 checkpoint of configs/gpt2_tiny.yaml's model (speed does
not depend on the trained values). Each request: 16 prompt token ids, 16 new tokens, greedy.
Two loads per server:
- closed loop: Debian's `wrk` (POST script), 2 threads, 32 connections, --duration seconds: the
  highest throughput and its latency percentiles;
- open loop: this script sends requests on a fixed schedule (rate R, R x --open-duration (30 s)
  requests, each timed from its scheduled start, so queueing counts) at rising rates up to
  --max-rate (1000), and
  reports the highest rate whose P99 latency stays within 200 ms with at least 95 % of the
  requests answered at that rate.
The client runs on the same machine as the server (its 2 cores are shared): the figures are for
this machine, stated with it.
"""
import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

PROMPT_TOKENS, NEW_TOKENS = 16, 16
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def body(i, stream=False):
    prompt = [(7 * i + 13 * k) % 500 + 1 for k in range(PROMPT_TOKENS)]
    return json.dumps({"prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0, "stream": stream}).encode()


def headers(key):
    return {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}


def post(port, data, timeout=60, key=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=data, headers=headers(key))
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


def metrics(port, key=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers(key))
    text = urllib.request.urlopen(req, timeout=10).read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.split()
            values[name] = float(value)
    return values


class Server:
    def __init__(self, program, checkpoint, *flags):
        self.port = free_port()
        self.process = subprocess.Popen([program, "--checkpoint", checkpoint, "--port", str(self.port),
                                         "--queue-limit", "100000", *flags],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2).read()
                return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError(self.process.stderr.read()) from None
                time.sleep(0.1)
        raise RuntimeError("myriad-serve did not start")

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.communicate(timeout=60)


def run_wrk(port, duration, tmp, key=None):
    script = os.path.join(tmp, "post.lua")
    with open(script, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                f"wrk.body = '{body(1).decode()}'\n")
        if key:
            f.write(f'wrk.headers["Authorization"] = "Bearer {key}"\n')
    out = subprocess.run(["wrk", "-t2", "-c32", f"-d{int(duration)}s", "--latency", "-s", script,
                          f"http://127.0.0.1:{port}/v1/completions"], capture_output=True, text=True, check=True).stdout

    def ms(text):
        value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()
        return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    pct = {p: ms(v) for p, v in re.findall(r"^\s+(50|90|99)%\s+(\S+)", out, re.M)}
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"qps": rps, "p50": pct.get("50"), "p90": pct.get("90"), "p99": pct.get("99"),
            "errors": int(errors.group(1)) if errors else 0}


def open_loop(port, rate, duration, key=None):
    """Requests at fixed times i / rate; latency from the scheduled time. Returns (answered share,
    p50, p90, p99 in ms, achieved rate)."""
    count = max(1, int(rate * duration))
    start = time.perf_counter() + 0.2
    latencies, failures = [], [0]
    lock = threading.Lock()
    next_index = [0]

    def worker():
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= count:
                return
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            try:
                post(port, body(i), timeout=30, key=key)
                with lock:
                    latencies.append(time.perf_counter() - due)
            except OSError:
                with lock:
                    failures[0] += 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(count, 256))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    latencies.sort()

    def pct(p):
        return 1e3 * latencies[min(len(latencies) - 1, int(p * len(latencies)))] if latencies else float("inf")

    return len(latencies) / count, pct(0.5), pct(0.9), pct(0.99), len(latencies) / elapsed


def measure(program, checkpoint, flags, args, tmp, key=None):
    server = Server(program, checkpoint, *flags)
    try:
        for i in range(8):
            post(server.port, body(i), key=key)
        before = metrics(server.port, key)
        closed = run_wrk(server.port, args.duration, tmp, key)
        if closed["errors"]:
            raise RuntimeError(f"{closed['errors']} requests were not answered 2xx")
        after = metrics(server.port, key)
        generated = after["myriad_generated_tokens_total"] - before["myriad_generated_tokens_total"]
        steps = after["myriad_batch_sequences_count"] - before["myriad_batch_sequences_count"]
        closed["tokens_per_s"] = generated / int(args.duration)
        sequences = after["myriad_batch_sequences_sum"] - before["myriad_batch_sequences_sum"]
        closed["mean_batch"] = sequences / max(steps, 1)
        closed["ttft_ms"] = 1e3 * ((after["myriad_time_to_first_token_seconds_sum"]
                                    - before["myriad_time_to_first_token_seconds_sum"])
                                   / max(after["myriad_time_to_first_token_seconds_count"]
                                         - before["myriad_time_to_first_token_seconds_count"], 1))
        best = None
        rate = args.start_rate
        while rate <= args.max_rate:
            share, p50, p90, p99, achieved = open_loop(server.port, rate, args.open_duration, key)
            print(f"    open loop {rate:>6.0f}/s: answered {100 * share:5.1f} %, achieved {achieved:7.1f}/s, "
                  f"P50 {p50:7.1f} ms, P90 {p90:7.1f} ms, P99 {p99:7.1f} ms", flush=True)
            if share < 0.95 or p99 > 200.0:
                break
            best = (rate, p50, p90, p99)
            rate *= 2
        closed["open_loop"] = best
        return closed
    finally:
        server.stop()


def transformers_rates(checkpoint, tmp, n):
    """Requests/s of Hugging Face `generate` on the exported model, batch 1 and batch 32 (the same
    16-token prompts, so a static batch needs no padding), in a fresh interpreter (no myriad loaded:
    torch's own libraries, all cores to it); or the reason it did not run."""
    hf = os.path.join(tmp, "hf")
    subprocess.run([sys.executable, "-m", "myriad.convert", "export", "--format", "hf", checkpoint, hf], check=True,
                   capture_output=True)
    result = subprocess.run([sys.executable, __file__, "--hf-generate", hf, "--requests", str(n)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        return f"failed: {result.stderr.strip()[-300:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def hf_generate(hf, n):
    """--hf-generate: prints {"batch 1": requests/s, "batch 32": requests/s, "torch": version}."""
    try:
        import torch
        import transformers
    except ImportError as e:
        print(json.dumps(f"skipped: {e.name} is not installed"))
        return 0
    model = transformers.AutoModelForCausalLM.from_pretrained(hf).eval()
    prompts = [json.loads(body(i))["prompt"] for i in range(n)]
    rates = {"torch": torch.__version__, "transformers": transformers.__version__,
             "threads": torch.get_num_threads()}
    with torch.no_grad():
        model.generate(torch.tensor(prompts[:1]), max_new_tokens=2, do_sample=False)  # warm-up
        for batch in (1, 32):
            start = time.perf_counter()
            for first in range(0, n, batch):
                ids = torch.tensor(prompts[first:first + batch])
                model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                               min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
            rates[f"batch {batch}"] = n / (time.perf_counter() - start)
    print(json.dumps(rates))
    return 0


def tiny_checkpoint(tmp):
    import myriad

    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w") as f:
        f.write("\n".join(f"line {i} of a small corpus for the serving benchmark" for i in range(2000)))
    config = myriad.Config.from_file(os.path.join(REPO, "configs", "gpt2_tiny.yaml"))
    for key in (f"data.path={corpus}", f"logging.dir={tmp}/run", f"checkpoint.dir={tmp}/run/checkpoints",
                "logging.level=warn", "parallel.dp=0", "training.gradient_accumulation=0"):
        config.set(key)
    return myriad.Engine(config).save()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint")
    parser.add_argument("--duration", type=int, help="whole seconds of closed-loop load per server (default 30; "
                        "--quick 1)")
    parser.add_argument("--open-duration", type=float, help="seconds per open-loop rate (default 30; --quick 0.5)")
    parser.add_argument("--auth", action="store_true",
                        help="also serve with --auth and one API key (user, viewer): the cost of authentication")
    parser.add_argument("--start-rate", type=float, default=25.0)
    parser.add_argument("--max-rate", type=float, help="the highest open-loop rate tried (default 1000; --quick 50)")
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes (the test's mode)")
    parser.add_argument("--hf-generate", metavar="HF_DIR", help=argparse.SUPPRESS)  # the comparison's own process
    parser.add_argument("--requests", type=int, help="requests the transformers comparison generates (default 64; "
                        "--quick 32)")
    args = parser.parse_args(argv)
    if args.hf_generate:
        return hf_generate(args.hf_generate, args.requests or 64)
    # --quick shortens what the command line left at its default, never what it gave.
    for name, full, quick in (("duration", 30, 1), ("open_duration", 30.0, 0.5), ("max_rate", 1000.0, 50.0),
                              ("requests", 64, 32)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.duration < 1 or args.open_duration <= 0 or args.requests < 1:
        parser.error("--duration must be >= 1 (wrk counts whole seconds), --open-duration > 0 and --requests >= 1")
    if not 0 < args.start_rate <= args.max_rate:
        parser.error(f"--start-rate must be > 0 and <= --max-rate ({args.max_rate:g}); got {args.start_rate:g}")
    from myriad.cli import SERVE_PROGRAM, SERVE_PROGRAM_ENV, find_program

    program = find_program(SERVE_PROGRAM, SERVE_PROGRAM_ENV)[0]
    if program is None or shutil.which("wrk") is None:
        print("bench_serve: needs myriad-serve (build/tools) and wrk (scripts/setup.sh installs it)")
        return 2
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint or tiny_checkpoint(tmp)
        print(f"bench_serve: {checkpoint}; {os.cpu_count()} x {cpu}; {PROMPT_TOKENS} prompt + {NEW_TOKENS} new "
              f"tokens, greedy; command: {' '.join([os.path.basename(sys.argv[0]), *sys.argv[1:]])}", flush=True)
        rows = {}
        servers = [("continuous batching", [], None), ("one request at a time", ["--max-sequences", "1"], None)]
        if args.auth:
            from myriad import serve_keys

            keys = os.path.join(tmp, "keys.json")
            token = serve_keys.add(keys, "bench", ["user", "viewer"])
            servers.append(("continuous batching, --auth (one API key)", ["--auth", keys], token))
        for name, flags, key in servers:
            print(f"  {name}:", flush=True)
            rows[name] = measure(program, checkpoint, flags, args, tmp, key)
        try:
            hf = transformers_rates(checkpoint, tmp, args.requests)
        except Exception as e:  # noqa: BLE001 (the comparison's failure is reported, the table stands)
            hf = f"failed: {type(e).__name__}: {e}"
    print()
    print("| server | closed-loop QPS (wrk, 32 conns) | P50 / P90 / P99 ms | tokens/s | mean batch (seqs) "
          "| mean TTFT ms | open loop: highest rate with P99 <= 200 ms (P99) |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        best = r["open_loop"]
        open_text = f"{best[0]:.0f}/s ({best[3]:.0f} ms)" if best else "none of the rates tried"
        print(f"| {name} | {r['qps']:.1f} | {r['p50']:.1f} / {r['p90']:.1f} / {r['p99']:.1f} | "
              f"{r['tokens_per_s']:.0f} | {r['mean_batch']:.2f} | {r['ttft_ms']:.1f} | {open_text} |")
    gain = rows["continuous batching"]["qps"] / max(rows["one request at a time"]["qps"], 1e-9)
    print(f"\nbatching gain (closed-loop QPS): {gain:.2f}x")
    if args.auth:
        authed = rows["continuous batching, --auth (one API key)"]["qps"]
        ratio = authed / rows["continuous batching"]["qps"]
        print(f"authentication: closed-loop QPS {ratio:.3f}x of the open server's")
    if isinstance(hf, dict):
        ours = rows["continuous batching"]["qps"]
        print(f"transformers {hf['transformers']} (torch {hf['torch']}, {hf['threads']} threads) generate on the "
              f"exported model, the same requests:")
        for batch in (1, 32):
            rate = hf[f"batch {batch}"]
            print(f"  batch {batch:>2}: {rate:.1f} requests/s; myriad serve continuous batching / this: "
                  f"{ours / rate:.2f}x")
    else:
        print(f"transformers: {hf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
