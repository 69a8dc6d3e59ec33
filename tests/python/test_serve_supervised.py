"""`myriad run -- myriad-serve ...`: the supervisor restarts a server that crashed (killed by a
signal) and ends the supervision when the server drains and exits 0 after SIGTERM."""

import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from package_under_test import PYTHONPATH, REPO
from serve_process import free_port, serve_program, skip_reason, tiny_checkpoint

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))


def children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def wait_listening(process, deadline):
    """Reads the supervisor's stdout (the server's, passed through) up to the ready line."""
    while time.time() < deadline:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"supervisor exited {process.poll()}")
        if "listening on http://" in line:
            return
    raise AssertionError("myriad-serve did not start in time")


def test_supervisor_restarts_a_crashed_server_and_stops_after_a_drain(tmp_path):
    checkpoint = tiny_checkpoint(tmp_path)
    port = free_port()
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "myriad.run", "--max-restarts", "2", "--backoff", "0", "--",
               serve_program(), "--checkpoint", str(checkpoint), "--host", "127.0.0.1", "--port", str(port),
               "--drain-seconds", "5"]
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        deadline = time.time() + 50
        wait_listening(process, deadline)
        [server] = children(process.pid)
        os.kill(server, signal.SIGKILL)  # a crash
        wait_listening(process, deadline)  # restarted on the same port
        [restarted] = children(process.pid)
        assert restarted != server
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            assert r.status == 200
        process.send_signal(signal.SIGTERM)  # passed on: the server drains and exits 0
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert "attempt 1 failed" in err and "SIGKILL" in err, err
        assert "attempt 2/3" in err, err
        assert "attempt 3/3" not in err, err  # the clean drain exit is not restarted
    finally:
        if process.poll() is None:
            for pid in children(process.pid):
                os.kill(pid, signal.SIGKILL)
            process.kill()
            process.communicate()
