"""INT8 export sizes and serving memory of one model: a step-0 checkpoint of CONFIG (with --set
overrides; one process: parallel.* reset to 1), its weight-only INT8 export (the summary
`myriad.convert export --format int8` prints: int8 vs fp32 vs bf16, what stayed f32), then the
resident memory (VmRSS, and the peak VmHWM) of a fresh process serving it f32 (Engine.load) and
one serving the INT8 file (Engine.load_int8), each after one forward of a (1, T) batch, with its
memory report. The INT8 engine's peak still includes the f32 engine it was built as (the Engine
allocates and initialises every f32 buffer before load_int8 frees them). Last, the same for the
server: `myriad-serve --checkpoint` vs `myriad-serve --int8` (one sequence's KV cache, after one
completion), whose model never holds an f32 copy of the int8 weights.

    PYTHONPATH=python python benchmarks/int8_serving_memory.py configs/llama_tiny.yaml [--set k=v ...]

The sizes do not depend on training (a step-0 checkpoint is enough); the numbers go to
docs/checkpoints.md with the machine they were measured on.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SERVE = r"""
import json, sys, numpy as np, myriad
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
config = myriad.Config.from_string(open(sys.argv[1]).read())
kind, source = sys.argv[2], sys.argv[3]
engine = myriad.Engine(config)
(engine.load if kind == "f32" else engine.load_int8)(source)
T = int(config["training.seq_len"] or 64)
engine.forward(np.zeros((1, T), dtype=np.int64))
print(json.dumps({"rss": status("VmRSS"), "peak": status("VmHWM"), "report": engine.memory_report()}))
"""


def server_memory(program, source_flag, source, tokens):
    """VmRSS and VmHWM of myriad-serve serving `source` after one completion of `tokens` ids."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([program, source_flag, source, "--port", str(port), "--max-sequences", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read()
                break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError(process.stderr.read()) from None
                time.sleep(0.1)
        body = json.dumps({"prompt": tokens, "max_tokens": 4, "temperature": 0}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=300).read()
        fields = {}
        with open(f"/proc/{process.pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    fields[key] = int(value.split()[0]) * 1024
        return fields["VmRSS"], fields["VmHWM"]
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    import myriad
    from myriad import int8

    with tempfile.TemporaryDirectory() as work:
        config = myriad.Config.from_file(args.config)
        for key in ("parallel.dp=0", "parallel.tp=1", "parallel.pp=1", "parallel.cp=1", "parallel.ep=1",
                    f"logging.dir={work}/logs", f"checkpoint.dir={work}/checkpoints", "logging.level=warn",
                    "logging.measure_peak=false", *args.set):
            config.set(key)
        engine = myriad.Engine(config)
        checkpoint = engine.save()
        parameters = sum(t.numpy().size for t in engine.parameters().values())
        del engine
        report = int8.export_int8(checkpoint, os.path.join(work, "model.int8.safetensors"))
        print(f"{args.config} {' '.join(args.set)}: {parameters} parameters ({report['architecture']})")
        print(int8.describe_report(report))
        config_path = os.path.join(work, "serve.yaml")
        with open(config_path, "w") as f:
            f.write(config.to_yaml())
        for kind, source in (("f32", checkpoint), ("int8", report["path"])):
            out = subprocess.run([sys.executable, "-c", SERVE, config_path, kind, source], capture_output=True,
                                 text=True, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
            result = json.loads(out.stdout.strip().splitlines()[-1])
            r = result["report"]
            print(f"serving {kind}: VmRSS {result['rss'] / 2**20:.1f} MiB (peak VmHWM {result['peak'] / 2**20:.1f} "
                  f"MiB); memory report: parameters "
                  f"{r['parameters'] / 2**20:.1f} MiB, gradients {r['gradients'] / 2**20:.1f} MiB, optimizer "
                  f"{r['optimizer'] / 2**20:.1f} MiB")
        from myriad.cli import SERVE_PROGRAM, SERVE_PROGRAM_ENV, find_program
        program = find_program(SERVE_PROGRAM, SERVE_PROGRAM_ENV)[0]
        if program is None:
            print("myriad-serve: not found (build/tools/myriad-serve): server memory skipped")
            return
        for kind, flag, source in (("f32", "--checkpoint", checkpoint), ("int8", "--int8", report["path"])):
            rss, peak = server_memory(program, flag, source, [1, 2, 3])
            print(f"myriad-serve {kind}: VmRSS {rss / 2**20:.1f} MiB (peak VmHWM {peak / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
