"""The audit log (python/myriad/audit.py, docs/security.md): a real tiny run that trains, checkpoints,
resumes and exports leaves a log that verifies with its actions in order; copies of it with each kind
of tampering (a record deleted, edited, forged and inserted, two swapped, the last line cut, another
key) are reported at the right record with the right kind, by verify() and by `myriad audit
verify` (exit 1); a tampered log is not appended to, by the library or the driver; without a key no
log is written and nothing fails. Plus the canonical encoding, the folder digest, two writers on
one file and `myriad audit show`'s filters."""
import hashlib
import json
import multiprocessing
import os
import subprocess
import sys

import pytest

from myriad import audit
from package_under_test import DRIVER, PYTHONPATH
from test_train_driver import TINY_YAML
from tiny_corpus import write_corpus

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RUN_FLAGS = ["--set", "training.steps=6", "--set", "checkpoint.every=3", "--set", "training.eval_every=0",
             "--set", "sample.tokens=0", "--set", "logging.every=3"]


def write_key(path):
    path.write_bytes(os.urandom(32))
    os.chmod(path, 0o600)
    return path


def environ(key=None, **extra):
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="2")
    for name in (audit.KEY_FILE_ENV, audit.LOG_ENV):
        env.pop(name, None)
    if key is not None:
        env[audit.KEY_FILE_ENV] = str(key)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def driver(config, *args, key=None, **extra):
    return subprocess.run([sys.executable, DRIVER, "--config", str(config), *args], cwd=REPO,
                          env=environ(key, **extra), capture_output=True, text=True, timeout=300)


def myriad(*args, key=None, **extra):
    return subprocess.run([sys.executable, "-m", "myriad.cli", *map(str, args)], cwd=REPO,
                          env=environ(key, **extra), capture_output=True, text=True, timeout=300)


def lines_of(path):
    return path.read_bytes().split(b"\n")[:-1]


def write_lines(path, lines):
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("audit")
    corpus = write_corpus(root / "corpus.txt")
    config = root / "tiny.yaml"
    config.write_text(TINY_YAML.format(corpus=corpus, run=root / "run"))
    return root, config


@pytest.fixture(scope="module")
def audited_run(tiny):
    """A run with an audit key: 6 steps with a checkpoint at 3 and 6, resumed to 8 steps keeping 2 (step 3
    pruned), its last checkpoint exported; (log path, key path, root)."""
    root, config = tiny
    key = write_key(root / "audit.key")
    first = driver(config, *RUN_FLAGS, key=key)
    assert first.returncode == 0, first.stderr
    resumed = driver(config, *RUN_FLAGS, "--set", "training.steps=8", "--set", "checkpoint.keep=2", "--resume", "auto",
                     key=key)
    assert resumed.returncode == 0, resumed.stderr
    exported = myriad("convert", "export", root / "run" / "checkpoints" / "step_00000008", root / "model.safetensors",
                      key=key)
    assert exported.returncode == 0, exported.stderr
    return root / "run" / "audit.jsonl", key, root


EXPECTED_ACTIONS = ["audit.log_created", "training.started", "checkpoint.saved", "checkpoint.saved",
                    "training.finished", "checkpoint.loaded", "training.resumed", "checkpoint.saved",
                    "checkpoint.pruned", "training.finished", "model.exported"]


def test_a_real_run_leaves_a_log_that_verifies_with_its_operations_in_order(audited_run):
    log, key, root = audited_run
    result = audit.verify(log, audit.load_key(key))
    assert result.ok, result
    records = [json.loads(line) for line in lines_of(log)]
    assert [r["action"] for r in records] == EXPECTED_ACTIONS
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert result.records == len(records)
    started, saved3 = records[1], records[2]
    resolved = (root / "run" / "config.yaml").read_bytes()  # the resumed run's resolved config
    assert records[6]["details"]["config_sha256"] == hashlib.sha256(resolved).hexdigest()
    assert len(started["details"]["config_sha256"]) == 64
    assert started["details"]["layout"] == "dp 1 x tp 1 x pp 1 x cp 1 x ep 1, zero 0"
    assert started["actor"]["pid"] > 0 and started["actor"]["api_key_id"] is None
    assert saved3["details"]["step"] == 3 and len(saved3["details"]["manifest_sha256"]) == 64
    saved6 = records[3]
    manifest = root / "run" / "checkpoints" / "step_00000006" / "manifest.json"
    assert saved6["details"]["manifest_sha256"] == audit.file_digest(manifest)
    assert records[5]["details"]["step"] == 6 and records[6]["details"]["checkpoint"].endswith("step_00000006")
    pruned = records[8]
    assert pruned["target"].endswith("step_00000003") and pruned["details"]["step"] == 3
    assert pruned["details"]["keep"] == 2 and not (root / "run" / "checkpoints" / "step_00000003").exists()
    exported = records[10]["details"]
    assert exported["source_sha256"] == audit.folder_digest(root / "run" / "checkpoints" / "step_00000008")
    assert exported["target_sha256"] == audit.file_digest(root / "model.safetensors")
    assert exported["config_sha256"] == audit.file_digest(root / "model.yaml")
    text = log.read_text()
    assert key.read_bytes().hex() not in text  # no key material in the records
    command = myriad("audit", "verify", log, "--audit-key", key)
    assert command.returncode == 0, command.stdout + command.stderr
    assert f"intact, {len(records)} records, final hash {result.final_hash}" in command.stdout


def tampered(tmp_path, log, change):
    lines = lines_of(log)
    return write_lines(tmp_path / "tampered.jsonl", change(lines))


def edit(lines, index, field, value):
    record = json.loads(lines[index])
    record[field] = value
    return lines[:index] + [audit.canonical(record)] + lines[index + 1:]


def forged_after(lines, index):
    """A record a forger without the key inserts after lines[index]: the right seq and prev, a made-up MAC."""
    previous = json.loads(lines[index])
    forged = dict(previous, seq=previous["seq"] + 1, prev=audit.record_hash(previous), action="checkpoint.deleted",
                  mac="0" * 64)
    return lines[:index + 1] + [audit.canonical(forged)] + lines[index + 1:]


TAMPERING = {
    "a_middle_record_deleted": (lambda lines: lines[:3] + lines[4:], 4, "deleted"),
    "a_field_edited": (lambda lines: edit(lines, 2, "target", "/elsewhere"), 3, "modified"),
    "a_result_edited_on_the_last_record": (lambda lines: edit(lines, len(lines) - 1, "result", "error"), 11,
                                           "modified"),
    "a_forged_record_inserted": (lambda lines: forged_after(lines, 2), 4, "inserted"),
    "a_genuine_record_repeated": (lambda lines: lines[:5] + [lines[3]] + lines[5:], 6, "inserted"),
    "two_records_swapped": (lambda lines: lines[:2] + [lines[3], lines[2]] + lines[4:], 3, "reordered"),
    "the_header_deleted": (lambda lines: lines[1:], 1, "deleted"),
}


@pytest.mark.parametrize("name", list(TAMPERING))
def test_verify_names_the_first_tampered_record_and_its_kind(audited_run, tmp_path, name):
    log, key, _ = audited_run
    change, record, kind = TAMPERING[name]
    copy = tampered(tmp_path, log, change)
    result = audit.verify(copy, audit.load_key(key))
    assert not result.ok
    assert (result.problem.record, result.problem.kind) == (record, kind), result.problem
    assert result.problem.message.startswith(f"record {record}: {kind}")
    command = myriad("audit", "verify", copy, key=key)  # the key from the environment
    assert command.returncode == 1, command.stdout + command.stderr
    assert command.stdout.strip() == f"{copy}: {result.problem.message}"


def test_a_cut_last_line_is_reported_as_truncated(audited_run, tmp_path):
    log, key, _ = audited_run
    data = log.read_bytes()
    copy = tmp_path / "cut.jsonl"
    copy.write_bytes(data[:len(data) - 40])
    result = audit.verify(copy, audit.load_key(key))
    assert (result.problem.record, result.problem.kind) == (len(EXPECTED_ACTIONS), "truncated")
    assert result.records == len(EXPECTED_ACTIONS) - 1


def test_another_key_is_reported_as_wrong_key_or_modified_first_record(audited_run, tmp_path):
    log, _, _ = audited_run
    other = write_key(tmp_path / "other.key")
    result = audit.verify(log, audit.load_key(other))
    assert (result.problem.record, result.problem.kind) == (1, "wrong_key")
    assert "wrong key or modified first record" in result.problem.message
    command = myriad("audit", "verify", log, "--audit-key", other)
    assert command.returncode == 1 and "record 1:" in command.stdout


def test_verify_without_a_key_or_log_is_bad_input(audited_run, tmp_path):
    log, key, _ = audited_run
    assert myriad("audit", "verify", log).returncode == 2
    missing = myriad("audit", "verify", tmp_path / "none.jsonl", "--audit-key", key)
    assert missing.returncode == 2 and "cannot be read" in missing.stderr
    short = tmp_path / "short.key"
    short.write_bytes(b"x" * 16)
    refused = myriad("audit", "verify", log, "--audit-key", short)
    assert refused.returncode == 2 and "at least 32" in refused.stderr


def test_appending_to_a_tampered_log_is_refused_naming_the_record(audited_run, tmp_path):
    log, key, _ = audited_run
    copy = tampered(tmp_path, log, TAMPERING["a_field_edited"][0])
    before = copy.read_bytes()
    with pytest.raises(audit.AuditError, match="refusing to append .*record 3: modified"):
        audit.AuditLog(str(copy), audit.load_key(key))
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(log.read_bytes()[:-40])
    with pytest.raises(audit.AuditError, match="truncated"):
        audit.AuditLog(str(cut), audit.load_key(key))
    assert copy.read_bytes() == before


def test_the_driver_refuses_to_train_into_a_tampered_log(audited_run, tiny, tmp_path):
    log, key, root = audited_run
    _, config = tiny
    copy = tampered(tmp_path, log, TAMPERING["a_middle_record_deleted"][0])
    before = sorted(os.listdir(root / "run" / "checkpoints"))
    result = driver(config, *RUN_FLAGS, "--set", "training.steps=10", "--resume", "auto", key=key,
                    **{audit.LOG_ENV: copy})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "refusing to append" in result.stderr and "record 4: deleted" in result.stderr
    assert "Iteration:" not in result.stdout
    assert sorted(os.listdir(root / "run" / "checkpoints")) == before


def test_without_a_key_no_log_is_written_and_the_run_succeeds(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY_YAML.format(corpus=corpus, run=tmp_path / "run"))
    result = driver(config, *RUN_FLAGS, "--set", "training.steps=2")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "run" / "audit.jsonl").exists()
    assert "the audit log is not written" in result.stderr
    quiet = audit.trail(str(tmp_path / "x.jsonl"), environ={})
    assert not quiet.enabled and quiet.record("anything", "x") is None
    assert not (tmp_path / "x.jsonl").exists()


def test_show_filters_by_action_actor_and_time(audited_run):
    log, _, _ = audited_run
    records = [json.loads(line) for line in lines_of(log)]
    saved = myriad("audit", "show", log, "--action", "checkpoint.saved")
    assert saved.returncode == 0, saved.stderr
    assert len(saved.stdout.splitlines()) == 3 and all(" checkpoint.saved " in x for x in saved.stdout.splitlines())
    prefix = myriad("audit", "show", log, "--action", "training", "--json")
    assert [json.loads(x)["action"] for x in prefix.stdout.splitlines()] == [
        "training.started", "training.finished", "training.resumed", "training.finished"]
    user = records[0]["actor"]["os_user"]
    assert len(myriad("audit", "show", log, "--actor", user).stdout.splitlines()) == len(records)
    assert myriad("audit", "show", log, "--actor", "nobody-at-all").stdout == ""
    since = records[5]["time"]
    later = myriad("audit", "show", log, "--since", since, "--json").stdout.splitlines()
    assert [json.loads(x)["seq"] for x in later] == [r["seq"] for r in records if r["time"] >= since]
    until = myriad("audit", "show", log, "--until", since, "--json").stdout.splitlines()
    assert [json.loads(x)["seq"] for x in until] == [r["seq"] for r in records if r["time"] < since]
    bad = myriad("audit", "show", log, "--since", "yesterday")
    assert bad.returncode == 2 and "ISO 8601" in bad.stderr


def test_audit_help_names_both_subcommands():
    result = myriad("audit", "--help")
    assert result.returncode == 0 and "verify" in result.stdout and "show" in result.stdout
    verify = myriad("audit", "verify", "--help")
    assert verify.returncode == 0 and "--audit-key" in verify.stdout


# ---- units ----

def test_canonical_encoding_sorts_keys_and_keeps_unicode_as_utf8():
    a = audit.canonical({"b": 1, "a": {"y": [1, "ü"], "x": None}})
    b = audit.canonical({"a": {"x": None, "y": [1, "ü"]}, "b": 1})
    assert a == b == '{"a":{"x":null,"y":[1,"ü"]},"b":1}'.encode("utf-8")
    assert audit.canonical({"t": "日本"}) == '{"t":"日本"}'.encode("utf-8")
    with pytest.raises(ValueError):
        audit.canonical({"loss": float("nan")})


def test_a_record_reformatted_without_changing_its_content_still_verifies(tmp_path):
    key = os.urandom(32)
    path = tmp_path / "log.jsonl"
    with audit.AuditLog(str(path), key) as log:
        log.append("model.exported", "ü.safetensors", details={"z": 1, "a": "ß"})
    lines = [json.dumps(json.loads(x), ensure_ascii=True).encode() for x in lines_of(path)]
    write_lines(path, lines)
    assert audit.verify(path, key).ok


def test_unicode_in_a_record_verifies_and_an_edit_of_it_does_not(tmp_path):
    key = os.urandom(32)
    path = tmp_path / "log.jsonl"
    with audit.AuditLog(str(path), key) as log:
        log.append("model.imported", "/données/modèle", details={"note": "中文"})
        log.append("checkpoint.saved", "x")
    assert audit.verify(path, key).ok
    write_lines(path, edit(lines_of(path), 1, "target", "/donnees/modele"))
    problem = audit.verify(path, key).problem
    assert (problem.record, problem.kind) == (2, "modified")


def test_a_log_is_continued_by_a_later_writer(tmp_path):
    key = os.urandom(32)
    path = tmp_path / "log.jsonl"
    with audit.AuditLog(str(path), key) as log:
        log.append("training.started", "run")
    with audit.AuditLog(str(path), key) as log:
        last = log.append("training.finished", "run")
    assert last["seq"] == 3
    assert audit.verify(path, key).records == 3
    assert os.stat(path).st_mode & 0o777 == 0o600


def _append_many(path, key, count):
    with audit.AuditLog(path, key) as log:
        for i in range(count):
            log.append("checkpoint.saved", f"step_{i}", details={"writer": os.getpid()})


def test_two_writers_on_one_file_do_not_interleave(tmp_path):
    key = os.urandom(32)
    path = str(tmp_path / "log.jsonl")
    audit.AuditLog(path, key).close()
    writers = [multiprocessing.get_context("fork").Process(target=_append_many, args=(path, key, 40))
               for _ in range(2)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
        assert w.exitcode == 0
    result = audit.verify(path, key)
    assert result.ok, result
    assert result.records == 81


def test_folder_digest_covers_names_and_contents_in_sorted_order(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for folder, order in ((one, ["a", "sub/b"]), (two, ["sub/b", "a"])):
        for name in order:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(name.encode())
    assert audit.folder_digest(one) == audit.folder_digest(two)
    (two / "a").write_bytes(b"A")
    assert audit.folder_digest(one) != audit.folder_digest(two)
    (two / "a").write_bytes(b"a")
    os.rename(two / "a", two / "c")
    assert audit.folder_digest(one) != audit.folder_digest(two)
    assert audit.path_digest(one / "a") == audit.file_digest(one / "a")
    assert audit.path_digest(tmp_path / "missing") is None


def test_a_short_key_is_refused(tmp_path):
    short = tmp_path / "k"
    short.write_bytes(b"0" * 31)
    with pytest.raises(audit.AuditError, match="at least 32"):
        audit.load_key(short)
