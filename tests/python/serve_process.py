"""A myriad-serve process for the serving tests: started on a free loopback port, waited for until
it listens, stopped (SIGTERM drain) at the end. The program is found as `myriad serve` finds it
(myriad/cli.py find_program: $MYRIAD_SERVE_PROGRAM, the environment's scripts, PATH, the tree's
build/tools)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

from myriad.cli import SERVE_PROGRAM, SERVE_PROGRAM_ENV, find_program


def serve_program():
    return find_program(SERVE_PROGRAM, SERVE_PROGRAM_ENV)[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MPIRUN = shutil.which("mpirun")


def mpirun_launcher(ranks):
    """mpirun's words before the program for `ranks` ranks on this machine (root, 2 cores)."""
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [MPIRUN, "-np", str(ranks), *root, "--oversubscribe", "--mca", "mpi_yield_when_idle", "1",
            "-x", "OMP_NUM_THREADS=1"]


class Server:
    """`launcher`: words before the program (mpirun's, for a server split over ranks); `listening`:
    the /health statuses that mean it is up (401 too when /health needs a key)."""

    def __init__(self, *args, timeout=60, launcher=(), listening=(200,)):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen([*launcher, serve_program(), "--port", str(self.port), *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"myriad-serve exited {self.process.returncode}: {self.process.stderr.read()}")
            try:
                if self.get("/health")[0] in listening:
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("myriad-serve did not answer /health in time")

    def request(self, method, path, body=None, timeout=60, key=None):
        """`key`: an API key sent as Authorization: Bearer (myriad-serve --auth)."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def get(self, path):
        return self.request("GET", path)

    def post(self, body, timeout=60):
        return self.request("POST", "/v1/completions", body, timeout)

    def stop(self, timeout=30):
        """SIGTERM (drain), then the exit code and the output."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            out, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, err = self.process.communicate()
        return self.process.returncode, out, err

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


TINY_YAML = """\
model: {{architecture: llama, vocab_size: 300, n_layer: 2, n_head: {heads}, n_kv_head: {kv_heads}, n_embd: 32, \
context_length: 64}}
training: {{micro_batch: 2, seq_len: 64, steps: 1, warmup: 0, eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:300"}}
checkpoint: {{dir: {run}/checkpoints}}
logging: {{measure_peak: false, dir: {run}/logs, level: warn}}
"""


def tiny_checkpoint(folder, heads=2, kv_heads=1):
    """A step-0 checkpoint of a tiny LLaMA-style model (with its trained tokenizer) under `folder`."""
    import myriad
    from tiny_corpus import write_corpus

    corpus = write_corpus(folder / "corpus.txt", lines=500)
    config = myriad.Config.from_string(TINY_YAML.format(corpus=corpus, run=folder / "run", heads=heads,
                                                        kv_heads=kv_heads))
    return myriad.Engine(config).save()


TRAINED_YAML = """\
model: {{architecture: gpt2, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 64, context_length: 64}}
training: {{micro_batch: 4, gradient_accumulation: 1, seq_len: 64, steps: 30, lr: 3.0e-3, warmup: 0, eval_every: 0}}
data: {{path: {corpus}, tokenizer: "train:320"}}
checkpoint: {{dir: {run}/checkpoints}}
logging: {{measure_peak: false, dir: {run}/logs, level: warn}}
"""

PROMPTS = ["the cat", "a dog sees", "my friend likes the", "the old man", "a small bird watches a quiet",
           "our neighbour paints", "the teacher finds some", "the"]


def trained_gpt2(folder, steps=30):
    """A tiny GPT-2-style model trained `steps` steps on the test corpus (sharp enough that greedy
    tokens do not hang on float rounding): (its Engine, its checkpoint)."""
    import myriad
    from tiny_corpus import write_corpus

    corpus = write_corpus(folder / "corpus.txt")
    engine = myriad.Engine(myriad.Config.from_string(TRAINED_YAML.format(corpus=corpus, run=folder / "run")))
    for _ in range(steps):
        engine.step()
    return engine, engine.save()


def skip_reason():
    if serve_program() is None:
        return "myriad-serve is not built (build/tools/myriad-serve) or installed"
    if os.environ.get("MYRIAD_SKIP_SERVE"):
        return "MYRIAD_SKIP_SERVE is set"
    return None
