"""bench_http_front: the HTTP front's own cost per request — myriad-serve's C++ front (cpp-httplib)
against a Python front (FastAPI on uvicorn, one worker) answering the same request without any
model work, so the difference is what the front adds (docs/serving.md, "Why a C++ front").

    PYTHONPATH=python python3 benchmarks/bench_http_front.py [--duration 15] [--connections 32]

Both answer GET /v1/models with the same JSON body; Debian's `wrk` (2 threads) drives each for
--duration seconds at --connections connections on this machine (the client shares its cores).
FastAPI and uvicorn must be installed (`pip install fastapi uvicorn`); they are not dependencies of
myriad, and without them the Python row says so.
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FASTAPI_APP = '''
from fastapi import FastAPI
from fastapi.responses import Response
app = FastAPI()
BODY = {body!r}

@app.get("/v1/models")
def models():
    return Response(content=BODY, media_type="application/json")

@app.get("/health")
def health():
    return {{"status": "ok"}}
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port, process, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(process.stderr.read() if process.stderr else f"exited {process.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the server did not answer /health")


def wrk(port, duration, connections):
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{int(duration)}s", "--latency",
                          f"http://127.0.0.1:{port}/v1/models"], capture_output=True, text=True, check=True).stdout

    def ms(text):
        value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()
        return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    pct = {p: ms(v) for p, v in re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M)}
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), pct["50"], pct["99"]


def stop(process):
    process.send_signal(signal.SIGTERM)
    try:
        process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args(argv)
    # wrk runs 2 threads (-t2), each with at least one connection, and counts whole seconds.
    if args.connections < 2:
        parser.error(f"--connections must be >= 2 (wrk -t2 needs a connection per thread); got {args.connections}")
    if args.duration < 1:
        parser.error(f"--duration must be >= 1 (wrk counts whole seconds); got {args.duration:g}")
    from myriad.cli import SERVE_PROGRAM, SERVE_PROGRAM_ENV, find_program

    program = find_program(SERVE_PROGRAM, SERVE_PROGRAM_ENV)[0]
    if program is None or shutil.which("wrk") is None:
        print("bench_http_front: needs myriad-serve (build/tools) and wrk")
        return 2
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    from bench_serve import tiny_checkpoint

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = tiny_checkpoint(tmp)
        port = free_port()
        server = subprocess.Popen([program, "--checkpoint", checkpoint, "--port", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(port, server)
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models").read().decode()
            rows.append(("myriad-serve (C++, cpp-httplib)", *wrk(port, args.duration, args.connections)))
        finally:
            stop(server)
        try:
            import fastapi  # noqa: F401
            import uvicorn
        except ImportError as e:
            rows.append((f"FastAPI + uvicorn: skipped ({e.name} is not installed)", None, None, None))
        else:
            app = os.path.join(tmp, "front_app.py")
            with open(app, "w") as f:
                f.write(FASTAPI_APP.format(body=body))
            port = free_port()
            front = subprocess.Popen([sys.executable, "-m", "uvicorn", "front_app:app", "--port", str(port),
                                      "--log-level", "warning", "--no-access-log"], cwd=tmp,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                wait_for(port, front)
                rows.append((f"FastAPI {fastapi.__version__} + uvicorn {uvicorn.__version__} (Python, 1 worker)",
                             *wrk(port, args.duration, args.connections)))
            finally:
                stop(front)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "")
    print(f"bench_http_front: GET /v1/models, wrk -t2 -c{args.connections} -d{int(args.duration)}s; "
          f"{os.cpu_count()} x {cpu}")
    print("| front | requests/s | P50 ms | P99 ms |")
    print("|---|---|---|---|")
    for name, rps, p50, p99 in rows:
        print(f"| {name} | {rps:.0f} | {p50:.2f} | {p99:.2f} |" if rps else f"| {name} | | | |")
    if len(rows) == 2 and rows[1][1]:
        print(f"\nC++ front / Python front: {rows[0][1] / rows[1][1]:.1f}x requests/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
