"""deploy/nginx.conf in front of two `myriad serve` replicas (docs/deploy.md): Debian's nginx runs the
shipped file with only its ports and paths replaced; one replica is killed (SIGKILL) while requests
flow, and every request is still answered 200 — by the survivor, nginx retrying what the dead one
never answered — and streams pass through nginx unbuffered to [DONE]."""
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from package_under_test import REPO
from serve_process import Server, free_port, skip_reason, tiny_checkpoint

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
NO_NGINX = "nginx is not installed (scripts/setup.sh installs nginx-light)"
pytestmark = [pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason())),
              pytest.mark.skipif(NGINX is None, reason=NO_NGINX)]


def nginx_conf(tmp, front, replicas):
    """The shipped deploy/nginx.conf with the test's ports and a private folder for logs and temp files."""
    with open(os.path.join(REPO, "deploy", "nginx.conf")) as f:
        text = f.read()
    assert text.count("127.0.0.1:8000") == 1 and text.count("127.0.0.1:8001") == 1
    text = text.replace("127.0.0.1:8000", f"127.0.0.1:{front}")
    text = text.replace("127.0.0.1:8001", f"127.0.0.1:{replicas[0]}").replace("127.0.0.1:8002",
                                                                              f"127.0.0.1:{replicas[1]}")
    text = text.replace("/var/log/nginx", str(tmp)).replace("/var/lib/nginx", str(tmp))
    path = tmp / "nginx.conf"
    path.write_text(text)
    return path


def post(port, body, timeout=60):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return -1, str(e)


def test_nginx_keeps_answering_when_a_replica_dies(tmp_path):
    checkpoint = tiny_checkpoint(tmp_path)
    replicas, nginx = [], None
    try:
        replicas = [Server("--checkpoint", checkpoint, "--model-name", "tiny") for _ in range(2)]
        front = free_port()
        conf = nginx_conf(tmp_path, front, [r.port for r in replicas])
        nginx = subprocess.Popen([NGINX, "-p", str(tmp_path), "-c", str(conf), "-g",
                                  f"daemon off; pid {tmp_path}/nginx.pid;"], stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 20
        while post(front, {"prompt": [1], "max_tokens": 1})[0] != 200:
            assert nginx.poll() is None, nginx.stderr.read()
            assert time.time() < deadline, "nginx did not answer"
            time.sleep(0.05)
        done = []
        killed = threading.Event()

        def ask(i):
            status, text = post(front, {"prompt": [1 + i % 50, 2, 3], "max_tokens": 12, "temperature": 0.7,
                                        "seed": i})
            done.append(i)
            if len(done) == 60 and not killed.is_set():
                killed.set()
                replicas[0].process.send_signal(signal.SIGKILL)  # mid-load: requests are in flight on it
            return status, text

        with ThreadPoolExecutor(max_workers=12) as pool:
            results = list(pool.map(ask, range(240)))
        assert killed.is_set()
        assert replicas[0].process.wait(10) == -signal.SIGKILL
        bad = [(i, r) for i, r in enumerate(results) if r[0] != 200]
        assert not bad, bad[:5]
        assert all(len(json.loads(text)["choices"][0]["token_ids"]) >= 1 for _, text in results)
        # After the kill: the survivor alone, streams included.
        for i in range(10):
            assert post(front, {"prompt": [i + 1], "max_tokens": 4})[0] == 200
        req = urllib.request.Request(f"http://127.0.0.1:{front}/v1/completions",
                                     data=json.dumps({"prompt": [5, 6], "max_tokens": 6, "stream": True}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            stream = r.read().decode()
        assert stream.rstrip().endswith("data: [DONE]"), stream
        # nginx saw the dead replica fail and passed its requests on (its error log says so).
        with open(tmp_path / "myriad_error.log") as f:
            errors = f.read()
        assert f"127.0.0.1:{replicas[0].port}" in errors, errors
    finally:
        if nginx is not None:
            nginx.send_signal(signal.SIGQUIT)
            try:
                nginx.wait(10)
            except subprocess.TimeoutExpired:
                nginx.kill()
        codes = [r.stop() for r in replicas if r.process.poll() is None]
    assert all(code == 0 for code, _, _ in codes), codes


def test_the_kubernetes_manifests_validate_against_the_schemas():
    """deploy/kubernetes/*.yaml against the Kubernetes API schemas (kubernetes-validate bundles them:
    offline), strictly (no unknown fields); a broken copy is refused, so the check can fail."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    yaml = pytest.importorskip("yaml")
    folder = os.path.join(REPO, "deploy", "kubernetes")
    kinds = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            for document in yaml.safe_load_all(f):
                kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)
                kinds[document["kind"]] = document
    assert set(kinds) == {"Deployment", "Service", "HorizontalPodAutoscaler"}
    assert kinds["Deployment"]["spec"]["replicas"] == 8
    probes = kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert probes["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert probes["livenessProbe"]["httpGet"]["path"] == "/health"
    broken = dict(kinds["Deployment"], spec=dict(kinds["Deployment"]["spec"], replicas="eight"))
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)
