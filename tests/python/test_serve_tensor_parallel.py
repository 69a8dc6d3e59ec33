"""`myriad serve` split over ranks (docs/serving.md, "Tensor-parallel serving"): myriad-serve under
mpirun -np 2 holds half of every layer's heads, MLP columns and vocabulary per rank, rank 0 serving
HTTP; its answers equal one process's — greedy and seeded tokens, alone and under concurrency —
SIGTERM to mpirun drains (the in-flight request finishes, every rank exits 0), and a model whose
heads do not split over the ranks is refused naming the parameter."""
import http.client
import json
import os
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from serve_process import PROMPTS, MPIRUN, Server, mpirun_launcher, serve_program, skip_reason, trained_gpt2

pytestmark = [pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason())),
              pytest.mark.skipif(MPIRUN is None, reason="mpirun not found")]

@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return trained_gpt2(tmp_path_factory.mktemp("serve_tp"))[1]


def tokens(server, prompt, **sampling):
    status, body, _ = server.post({"prompt": prompt, "max_tokens": 16, **sampling})
    assert status == 200, body
    return json.loads(body)["choices"][0]["token_ids"]


def test_two_ranks_answer_as_one_process_does(checkpoint):
    with Server("--checkpoint", checkpoint) as one, \
            Server("--checkpoint", checkpoint, launcher=mpirun_launcher(2)) as split:
        for prompt in PROMPTS[:4]:
            assert tokens(split, prompt, temperature=0) == tokens(one, prompt, temperature=0), prompt
            seeded = {"temperature": 0.8, "top_p": 0.9, "seed": 11}
            assert tokens(split, prompt, **seeded) == tokens(one, prompt, **seeded), prompt
        # Many at once: batched steps on the split model give each request its own answer.
        expected = [tokens(one, p, temperature=0) for p in PROMPTS]
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            got = list(pool.map(lambda p: tokens(split, p, temperature=0), PROMPTS))
        assert got == expected
        status, metrics, _ = split.get("/metrics")
        assert status == 200 and "myriad_requests_total" in metrics
        # SIGTERM to rank 0 itself (as a supervisor that knows it would): it drains, tells rank 1 to
        # stop, both exit 0 and so does mpirun.
        os.kill(rank_pid(split.process.pid, 0), signal.SIGTERM)
        out, err = split.process.communicate(timeout=60)
        assert split.process.returncode == 0, err
        assert "split over 2 ranks (tp)" in out and "rank 1: stopped after" in out, out
        one.stop()


def rank_pid(mpirun_pid, rank):
    """The pid of `rank` among mpirun's children (its OMPI_COMM_WORLD_RANK)."""
    for child in subprocess.run(["pgrep", "-P", str(mpirun_pid)], capture_output=True, text=True).stdout.split():
        environ = open(f"/proc/{child}/environ", "rb").read().split(b"\0")
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return int(child)
    raise AssertionError(f"no rank {rank} under mpirun {mpirun_pid}")


def test_sigusr1_to_mpirun_drains_every_rank(checkpoint):
    """OpenMPI's mpirun forwards SIGUSR1 to every rank and keeps the job: rank 0 drains (the request
    in flight finishes), the others follow it, and the job exits 0. (SIGTERM to mpirun ends the job:
    OpenMPI kills the ranks after a short timeout, too soon for a drain.)"""
    with Server("--checkpoint", checkpoint, "--max-batch-tokens", "1", launcher=mpirun_launcher(2)) as split:
        first_token, events = threading.Event(), []

        def long_request():  # streamed: the signal goes once its first token is out
            connection = http.client.HTTPConnection("127.0.0.1", split.port, timeout=120)
            connection.request("POST", "/v1/completions", json.dumps(
                {"prompt": PROMPTS[4], "max_tokens": 40, "temperature": 0, "stream": True}),
                {"Content-Type": "application/json"})
            for line in connection.getresponse():
                if line.startswith(b"data: {"):
                    events.append(json.loads(line[6:]))
                    first_token.set()

        client = threading.Thread(target=long_request)
        client.start()
        assert first_token.wait(60)
        split.process.send_signal(signal.SIGUSR1)
        client.join(120)
        assert events[-1]["choices"][0]["finish_reason"] == "length", events[-1:]  # all 40 tokens, not cancelled
        out, err = split.process.communicate(timeout=60)
        assert split.process.returncode == 0, err
        assert "draining" in out and "stopped (0 requests cancelled" in out and "rank 1: stopped after" in out, out


def test_heads_that_do_not_split_over_the_ranks_are_refused(checkpoint):
    result = subprocess.run([*mpirun_launcher(3), serve_program(), "--checkpoint", checkpoint, "--port", "0"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "tensor-parallel serving over 3 ranks" in result.stderr and "split evenly" in result.stderr, result.stderr


def test_hf_import_is_not_raced_by_several_ranks(tmp_path, monkeypatch, capsys):
    from myriad import serve

    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert serve.main(["--hf", str(tmp_path)]) == 2
    assert "2 ranks would race to import it" in capsys.readouterr().err
    assert not (tmp_path / ".myriad-serve").exists()
