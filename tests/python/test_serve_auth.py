"""`myriad serve --auth FILE` end to end (docs/security.md, "Access to the server"): keys made by
`myriad serve keys add` (Python's scrypt) open the C++ server (OpenSSL's scrypt); the `openai`
client works with a user key and gets AuthenticationError / PermissionDeniedError otherwise; every
role x endpoint cell over HTTP; a key's rate limit gives 429 with Retry-After; revoking a key and
POST /admin/keys/reload shuts it out; an operator's POST /admin/drain drains the server (exit 0);
the key file is 0600 and neither a key nor its hash reaches the server's output or an answer."""
import json
import os
import stat
import subprocess
import sys

import pytest

from myriad import serve_keys
from package_under_test import PYTHONPATH
from serve_process import Server, skip_reason, tiny_checkpoint

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))

ROLES = ("viewer", "user", "operator", "admin")
COMPLETION = {"prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0}
# (method, path, body, the roles allowed) — the specification, written here; drain is left out
# (it ends the server) and checked on its own below.
ENDPOINTS = [("GET", "/health", None, ROLES), ("GET", "/ready", None, ROLES),
             ("GET", "/metrics", None, ("viewer", "operator", "admin")), ("GET", "/v1/models", None, ("user", "admin")),
             ("POST", "/v1/completions", COMPLETION, ("user", "admin")), ("GET", "/admin/keys", None, ("admin",)),
             ("POST", "/admin/keys/reload", {}, ("admin",))]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("serve_auth"))


def keyring(folder, public=None, **rate):
    """A key file with one key per role (and `public` paths); returns its path and the keys."""
    path = str(folder / "keys.json")
    tokens = {role: serve_keys.add(path, f"{role}-1", [role], **rate) for role in ROLES}
    if public is not None:
        with open(path) as f:
            doc = json.load(f)
        doc["public"] = public
        serve_keys.save(path, doc)
    return path, tokens


def hashes(path):
    with open(path) as f:
        return [k["scrypt"]["hash"] for k in json.load(f)["keys"]]


def test_every_role_gets_exactly_its_endpoints(checkpoint, tmp_path):
    path, tokens = keyring(tmp_path, public=[])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with Server("--checkpoint", checkpoint, "--auth", path, listening=(401,)) as server:
        answers = []
        for method, endpoint, body, allowed in ENDPOINTS:
            status, text, headers = server.request(method, endpoint, body)
            assert status == 401, (endpoint, text)
            assert headers.get("WWW-Authenticate", "").startswith("Bearer"), headers
            status, text, _ = server.request(method, endpoint, body, key="myr_user-1_" + "0" * 64)
            assert status == 401, (endpoint, "a wrong secret", text)
            for role in ROLES:
                status, text, _ = server.request(method, endpoint, body, key=tokens[role])
                assert status == (200 if role in allowed else 403), (role, method, endpoint, text)
                if status == 403:
                    assert json.loads(text)["error"]["type"] == "permission_error"
                answers.append(text)
        status, text, _ = server.request("POST", "/admin/drain", {}, key=tokens["user"])
        assert status == 403, text
        status, metrics, _ = server.request("GET", "/metrics", key=tokens["viewer"])
        assert 'myriad_access_refused_total{status="401"}' in metrics
        assert 'myriad_access_refused_total{status="403"}' in metrics
        status, listing, _ = server.request("GET", "/admin/keys", key=tokens["admin"])
        assert sorted(k["id"] for k in json.loads(listing)["data"]) == sorted(f"{r}-1" for r in ROLES)
        code, out, err = server.stop()
    assert code == 0, err
    secrets_ = [*tokens.values(), *(t.split("_")[-1] for t in tokens.values()), *hashes(path)]
    for text in [out, err, *answers, listing]:
        for secret in secrets_:
            assert secret not in text, "a key or hash was written out"


def test_the_openai_client_with_keys(checkpoint, tmp_path):
    openai = pytest.importorskip("openai")
    path, tokens = keyring(tmp_path)  # default public paths: /health, /ready
    with Server("--checkpoint", checkpoint, "--auth", path) as server:
        assert server.get("/ready")[0] == 200  # probes need no key
        url = server.url + "/v1"
        reply = openai.OpenAI(base_url=url, api_key=tokens["user"]).completions.create(
            model="run", prompt=[1, 2, 3], max_tokens=3, temperature=0)
        assert len(reply.choices[0].text) >= 0 and reply.usage.completion_tokens == 3
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="myr_user-1_" + "f" * 64, max_retries=0).completions.create(
                model="run", prompt=[1], max_tokens=1)
        with pytest.raises(openai.PermissionDeniedError):
            openai.OpenAI(base_url=url, api_key=tokens["viewer"], max_retries=0).completions.create(
                model="run", prompt=[1], max_tokens=1)
        server.stop()


def test_rate_limit_revocation_and_drain(checkpoint, tmp_path):
    path, tokens = keyring(tmp_path, rate=0.05, burst=2)  # the third request within 20 s is refused
    with Server("--checkpoint", checkpoint, "--auth", path) as server:
        statuses = [server.request("POST", "/v1/completions", COMPLETION, key=tokens["user"]) for _ in range(3)]
        assert [s for s, _, _ in statuses[:2]] == [200, 200]
        status, text, headers = statuses[2]
        assert status == 429 and int(headers["Retry-After"]) >= 1, text
        # Revoked in the file (the CLI), reloaded by an admin: the remembered key is refused.
        env = dict(os.environ, PYTHONPATH=PYTHONPATH)
        revoke = subprocess.run([sys.executable, "-c", "import sys; from myriad.serve import main; "
                                 "sys.exit(main(sys.argv[1:]))", "keys", "revoke", path, "--id", "viewer-1"],
                                env=env, capture_output=True, text=True)
        assert revoke.returncode == 0, revoke.stderr
        assert server.request("GET", "/metrics", key=tokens["viewer"])[0] == 200  # until the reload
        status, text, _ = server.request("POST", "/admin/keys/reload", {}, key=tokens["admin"])
        assert status == 200 and '"keys":3' in text, text
        assert server.request("GET", "/metrics", key=tokens["viewer"])[0] == 401
        # An operator drains it: 202, then the program drains and exits 0 on its own.
        status, text, _ = server.request("POST", "/admin/drain", {}, key=tokens["operator"])
        assert status == 202, text
        out, err = server.process.communicate(timeout=60)
        assert server.process.returncode == 0, err
        assert "draining" in out


def test_admin_endpoints_are_closed_without_auth_and_bad_files_stop_the_start(checkpoint, tmp_path):
    with Server("--checkpoint", checkpoint) as server:
        status, text, _ = server.request("POST", "/admin/drain", {})
        assert status == 403 and "--auth" in text, text
        assert server.get("/health")[0] == 200
        server.stop()
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "myriad-serve-keys-v1", "keys": [{"id": "a", "roles": ["root"]}]}')
    from serve_process import serve_program
    result = subprocess.run([serve_program(), "--checkpoint", checkpoint, "--auth", str(bad), "--port", "0"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "role 'root'" in result.stderr and str(bad) in result.stderr, result.stderr


def test_the_server_continues_the_audit_log_that_myriad_audit_verifies(checkpoint, tmp_path, monkeypatch):
    from myriad import audit

    key_file = tmp_path / "audit.key"
    key_file.write_bytes(os.urandom(32))
    key_file.chmod(0o600)
    log = tmp_path / "audit.jsonl"
    monkeypatch.setenv("MYRIAD_AUDIT_KEY_FILE", str(key_file))
    monkeypatch.setenv("MYRIAD_AUDIT_LOG", str(log))
    key = audit.load_key(str(key_file))
    with audit.AuditLog(str(log), key) as python_writer:  # a log started by Python (training), floats and all
        python_writer.append("training.started", "runs/x", details={"val_loss": 4.4286, "note": "é\u0001"})
    path, tokens = keyring(tmp_path)
    with Server("--checkpoint", checkpoint, "--auth", path) as server:
        assert server.request("POST", "/v1/completions", COMPLETION)[0] == 401
        assert server.request("POST", "/v1/completions", COMPLETION, key=tokens["viewer"])[0] == 403
        assert server.request("GET", "/admin/keys", key=tokens["admin"])[0] == 200
        assert server.request("POST", "/admin/keys/reload", {}, key=tokens["admin"])[0] == 200
        assert server.request("POST", "/admin/drain", {}, key=tokens["operator"])[0] == 202
        _, err = server.process.communicate(timeout=60)
        assert server.process.returncode == 0, err
    result = audit.verify(str(log), key)
    assert result.ok, result.problem
    records = [json.loads(line) for line in log.read_text().splitlines()]
    actions = [r["action"] for r in records]
    assert actions == ["audit.log_created", "training.started", "model.loaded", "access.denied", "access.denied",
                       "admin.keys_listed", "admin.keys_reloaded", "admin.drain", "server.drain_started",
                       "model.unloaded"], actions
    by_action = {r["action"]: r for r in records}
    assert by_action["model.loaded"]["details"]["manifest_sha256"] == audit.file_digest(
        os.path.join(checkpoint, "manifest.json"))
    denied = [r for r in records if r["action"] == "access.denied"]
    assert [d["details"]["status"] for d in denied] == [401, 403]
    assert denied[1]["actor"]["api_key_id"] == "viewer-1" and denied[0]["actor"]["api_key_id"] is None
    assert by_action["admin.keys_listed"]["actor"]["api_key_id"] == "admin-1"
    assert by_action["admin.drain"]["actor"]["api_key_id"] == "operator-1"
    text = log.read_text()
    assert not any(t in text for t in tokens.values()) and not any(h in text for h in hashes(path))
    # A record changed by a byte: the server refuses to continue the log, naming the record.
    lines = log.read_text().splitlines(keepends=True)
    lines[3] = lines[3].replace('"access.denied"', '"access.denieD"')
    log.write_text("".join(lines))
    from serve_process import serve_program
    refused = subprocess.run([serve_program(), "--checkpoint", checkpoint, "--port", "0"], capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2 and "refusing to append to audit log" in refused.stderr, refused.stderr
    assert "record 4" in refused.stderr, refused.stderr
