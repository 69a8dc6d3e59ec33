"""The audit log: one tamper-evident JSON record per model operation (docs/security.md).

A log is a JSONL file; each line is one record in canonical JSON (sorted keys, no spaces, UTF-8):

    {"action": "checkpoint.saved", "actor": {"api_key_id": null, "host": "n1", "os_user": "ana", "pid": 7},
     "details": {...}, "mac": "<hex>", "prev": "<hex>", "result": "ok", "seq": 4, "target": "runs/x/...",
     "time": "2026-12-04T19:15:38.123456Z"}

Invariants, checked by verify():
- seq counts 1, 2, 3, ... from the header record (seq 1, action "audit.log_created"), which holds a
  random log id (details.log_id) and, after a key rotation, the final hash of the previous log
  (details.previous_log_final_hash);
- prev is the SHA-256 (hex) of the previous record's canonical bytes (mac included); the header's
  prev is the genesis value SHA-256("myriad-audit-v1:" + log_id), so the chain is bound to its id;
- mac is the HMAC-SHA256, under the audit key, of the record's canonical bytes without "mac".

So anyone without the key who edits, deletes, inserts, reorders or truncates records is caught at
the first record that changed; deleting the whole file or records at its end is not (ship the log
off-host; compare its final hash). Records hold no secrets: no key material, no API keys (only
an API key's id).

Writers: AuditLog appends under an exclusive flock of the file (two writers never interleave;
each append reads and checks the last record under the lock), opens the file with O_APPEND and
fsyncs after every record. Opening an existing log verifies it whole and refuses to continue a log
that does not verify, naming the record. The key is a file of at least 32 random bytes named by
$MYRIAD_AUDIT_KEY_FILE (or --audit-key on the commands that take it); without one nothing is
written (AuditTrail says so once).
"""
import collections
import datetime
import fcntl
import getpass
import hashlib
import hmac
import json
import math
import os
import secrets
import socket
import sys

KEY_FILE_ENV = "MYRIAD_AUDIT_KEY_FILE"  # the path of the audit key (>= 32 bytes)
LOG_ENV = "MYRIAD_AUDIT_LOG"  # the log's path; default: <logging.dir>/audit.jsonl for training
LOG_NAME = "audit.jsonl"
FORMAT = 1
MIN_KEY_BYTES = 32
HEADER_ACTION = "audit.log_created"
FIELDS = ("seq", "time", "actor", "action", "target", "result", "details", "prev", "mac")


class AuditError(Exception):
    """A key that cannot be used, a log that cannot be continued or written."""


def canonical(record):
    """The canonical bytes of a record (a dict of JSON values): sorted keys, no whitespace, UTF-8."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def record_hash(record):
    """SHA-256 (hex) of a whole record's canonical bytes: the next record's prev."""
    return hashlib.sha256(canonical(record)).hexdigest()


def genesis(log_id):
    """The prev of a log's header record."""
    return hashlib.sha256(f"myriad-audit-v{FORMAT}:{log_id}".encode()).hexdigest()


def record_mac(record, key):
    """HMAC-SHA256 (hex) under `key` of the record without its mac."""
    body = {k: v for k, v in record.items() if k != "mac"}
    return hmac.new(key, canonical(body), hashlib.sha256).hexdigest()


def mac_ok(record, key):
    return isinstance(record.get("mac"), str) and hmac.compare_digest(record["mac"], record_mac(record, key))


def load_key(path):
    """The audit key's bytes from `path`; an AuditError when it is unreadable or shorter than 32 bytes.
    A key file readable by group or others is used with a warning (it should be mode 0600)."""
    try:
        with open(path, "rb") as f:
            key = f.read()
            mode = os.fstat(f.fileno()).st_mode
    except OSError as e:
        raise AuditError(f"audit key file '{path}' cannot be read: {e.strerror}") from None
    if len(key) < MIN_KEY_BYTES:
        raise AuditError(f"audit key file '{path}' holds {len(key)} bytes; at least {MIN_KEY_BYTES} random bytes "
                         f"are needed (head -c 32 /dev/urandom > FILE; chmod 600 FILE)")
    if mode & 0o077:
        print(f"warning: audit key file '{path}' is readable by group or others (mode {mode & 0o777:o}); "
              f"chmod 600 it", file=sys.stderr, flush=True)
    return key


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def current_actor(api_key_id=None):
    """Who acts: the OS user, host, process id and (for server calls) the API key's id, never the key."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 — no login name (a container without a passwd entry)
        user = f"uid:{os.getuid()}"
    return {"os_user": user, "host": socket.gethostname(), "pid": os.getpid(), "api_key_id": api_key_id}


# ---- digests (the targets' identities in records) ----

def file_digest(path):
    """SHA-256 (hex) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def folder_digest(path):
    """SHA-256 (hex) of a folder: over its files in sorted order of their relative paths ('/'
    separated), each as the path's UTF-8 bytes, a NUL, the content's length (8 bytes, big-endian)
    and the content. Symbolic links are hashed as their target text; empty folders do not count."""
    files = []
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for name in names:
            full = os.path.join(root, name)
            files.append((os.path.relpath(full, path).replace(os.sep, "/"), full))
    h = hashlib.sha256()
    for rel, full in sorted(files):
        data = os.readlink(full).encode() if os.path.islink(full) else None
        h.update(rel.encode("utf-8") + b"\0")
        if data is None:
            h.update(os.path.getsize(full).to_bytes(8, "big"))
            with open(full, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        else:
            h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def path_digest(path):
    """file_digest or folder_digest of `path`; None when it does not exist."""
    if os.path.isdir(path):
        return folder_digest(path)
    if os.path.isfile(path):
        return file_digest(path)
    return None


# ---- verification ----

Problem = collections.namedtuple("Problem", ["record", "kind", "message"])
Problem.__doc__ = ("The first problem of a log: record (1-based line number, which is the record's seq in an "
                   "intact log), kind (modified, deleted, inserted, reordered, truncated, wrong_key, malformed) "
                   "and a one-line message.")


class VerifyResult:
    """verify()'s answer: ok, records (how many verified before the first problem, all when ok), problem
    (a Problem or None), final_hash (the hash of the last verified record: keep it off-host), log_id."""

    def __init__(self, records, problem, final_hash, log_id):
        self.records, self.problem, self.final_hash, self.log_id = records, problem, final_hash, log_id

    @property
    def ok(self):
        return self.problem is None

    def __repr__(self):
        return f"VerifyResult(ok={self.ok}, records={self.records}, problem={self.problem})"


def _parse(line):
    """The record on `line` (bytes without newline), or None when it is not a JSON object with every field."""
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(record, dict) or set(record) != set(FIELDS) or not isinstance(record["seq"], int):
        return None
    return record


def _read_lines(path):
    """(complete lines, whether the file ends with a line without its newline)."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    partial = lines[-1] != b""
    if not partial:
        lines.pop()
    return lines, partial


def verify(path, key):
    """Walks the log's chain and returns a VerifyResult naming the first problem: a record whose MAC
    fails (modified; inserted when the next record chains past it; on record 1: wrong key or modified
    first record), a gap in seq (deleted), a genuine record out of place (reordered; inserted when it
    repeats an earlier seq), a prev that does not chain (inserted from elsewhere), a last line that
    is not a complete record (truncated). Raises OSError when the file cannot be read."""
    lines, partial = _read_lines(path)
    records = [_parse(line) for line in lines]
    if not lines:
        return VerifyResult(0, Problem(1, "truncated", "record 1: missing — the log is empty (no header record)"),
                            None, None)
    expected_prev, log_id, seen = None, None, set()

    def problem(i, kind, text):
        return VerifyResult(i, Problem(i + 1, kind, f"record {i + 1}: {text}"), expected_prev, log_id)

    for i, record in enumerate(records):
        n = i + 1
        if record is None:
            if i == len(records) - 1 and partial:
                return problem(i, "truncated", "truncated — the last line is not a complete record")
            return problem(i, "modified", "modified — not a JSON record with the audit fields")
        if i == 0:
            if not mac_ok(record, key):
                return problem(i, "wrong_key", "MAC mismatch — wrong key or modified first record")
            details = record["details"] if isinstance(record["details"], dict) else {}
            log_id = details.get("log_id")
            if record["action"] != HEADER_ACTION or record["seq"] != 1 or not isinstance(log_id, str):
                kind = "deleted" if record["seq"] > 1 else "modified"
                return problem(i, kind, f"{kind} — the log does not start with its header record (seq 1, "
                               f"{HEADER_ACTION}); the first record has seq {record['seq']}")
            if record["prev"] != genesis(log_id):
                return problem(i, "modified", "modified — the header's prev is not its log id's genesis value")
            expected_prev, expected_seq = record_hash(record), 2
            seen.add(1)
            continue
        if not mac_ok(record, key):
            following = records[i + 1] if i + 1 < len(records) else None
            if following is not None and following["seq"] == expected_seq and following["prev"] == expected_prev:
                return problem(i, "inserted", "inserted — a record that is not in the chain (MAC mismatch; the "
                               f"next record follows record {n - 1})")
            return problem(i, "modified", f"modified — MAC mismatch (seq {record['seq']}, action "
                           f"{record['action']!r})")
        seq = record["seq"]
        if seq != expected_seq:
            later = {r["seq"] for r in records[i + 1:] if r is not None}
            if seq in seen:
                return problem(i, "inserted", f"inserted — a second copy of record {seq}")
            if seq < expected_seq or expected_seq in later:
                return problem(i, "reordered", f"reordered — seq {seq} where seq {expected_seq} belongs")
            missing = f"record {expected_seq}" if seq == expected_seq + 1 else f"records {expected_seq}-{seq - 1}"
            return problem(i, "deleted", f"deleted — {missing} missing before seq {seq}")
        if record["prev"] != expected_prev:
            return problem(i, "inserted", "inserted — its prev does not chain to the record before it "
                           "(a record of another log, or the chain was rebuilt)")
        seen.add(seq)
        expected_prev, expected_seq = record_hash(record), seq + 1
    return VerifyResult(len(records), None, expected_prev, log_id)


# ---- writing ----

def _last_line(fd):
    """The last complete line (bytes, no newline) of the open file, or None when it is empty; raises
    AuditError when the file does not end with a newline (a partial last record)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None
    if os.pread(fd, 1, size - 1) != b"\n":
        raise AuditError("its last line is not a complete record (truncated)")
    start, block = size - 1, 4096
    while True:
        begin = max(0, start - block)
        chunk = os.pread(fd, start - begin, begin)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            begin += cut + 1
            return os.pread(fd, size - 1 - begin, begin)
        if begin == 0:
            return os.pread(fd, size - 1, 0)
        block *= 2


class AuditLog:
    """An append-only audit log at `path` under `key` (bytes, >= 32). A new (or empty) file gets its
    header record; an existing one is verified whole first and refused (AuditError naming the record)
    when it does not verify. append() writes one record under an exclusive flock and fsyncs."""

    def __init__(self, path, key, previous_log_final_hash=None, verify_existing=True):
        if len(key) < MIN_KEY_BYTES:
            raise AuditError(f"the audit key has {len(key)} bytes; at least {MIN_KEY_BYTES} are needed")
        self.path, self._key = path, key
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._read_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise AuditError(f"audit log '{path}' cannot be opened: {e.strerror}") from None
        refused = None
        with self._locked():
            if os.fstat(self._read_fd).st_size == 0:
                log_id = secrets.token_hex(16)
                self._write({"seq": 1, "prev": genesis(log_id), "action": HEADER_ACTION, "target": path,
                             "result": "ok", "details": {"format": FORMAT, "log_id": log_id,
                                                         "previous_log_final_hash": previous_log_final_hash}})
            elif verify_existing:
                result = verify(path, key)
                if not result.ok:
                    refused = f"refusing to append to audit log '{path}': {result.problem.message}"
        if refused:
            self.close()
            raise AuditError(refused)

    def _locked(self):
        log = self

        class Lock:
            def __enter__(self):
                fcntl.flock(log._fd, fcntl.LOCK_EX)

            def __exit__(self, *exc):
                fcntl.flock(log._fd, fcntl.LOCK_UN)

        return Lock()

    def _write(self, fields, actor=None):
        record = dict(fields, time=utc_now(), actor=actor or current_actor())
        record["mac"] = record_mac(record, self._key)
        try:
            os.write(self._fd, canonical(record) + b"\n")
            os.fsync(self._fd)
        except OSError as e:
            raise AuditError(f"audit log '{self.path}' cannot be written: {e.strerror}") from None
        return record

    def append(self, action, target, result="ok", details=None, api_key_id=None):
        """Appends one record (after checking the current last record under the lock) and returns it."""
        with self._locked():
            try:
                line = _last_line(self._read_fd)
            except AuditError as e:
                raise AuditError(f"refusing to append to audit log '{self.path}': {e}") from None
            last = _parse(line) if line is not None else None
            if last is None or not mac_ok(last, self._key):
                raise AuditError(f"refusing to append to audit log '{self.path}': its last record does not "
                                 f"verify (modified, truncated or another key)")
            return self._write({"seq": last["seq"] + 1, "prev": record_hash(last), "action": action,
                                "target": target, "result": result, "details": details or {}},
                               current_actor(api_key_id))

    def close(self):
        for fd in (self._fd, self._read_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fd = self._read_fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- the hooks' side: a no-op without a key ----

_said_no_key = []


class AuditTrail:
    """What the operations call: record(action, target, ...) appends to the log when an audit key is
    configured and does nothing otherwise. Built by trail(); every method is cheap when disabled."""

    def __init__(self, log=None):
        self.log = log
        self._pending = []  # checkpoints saved in the background whose manifest is not written yet
        self._folder, self._keep, self._known = None, None, set()  # the checkpoint folder watched for pruning

    def watch_checkpoints(self, folder, keep):
        """Records checkpoint.pruned for each complete checkpoint of `folder` that disappears (retention
        keeps the newest `keep`; it runs in C++ at the end of each save, seen here after the save's record)."""
        self._folder, self._keep = folder, keep
        self._known = self._checkpoints()

    def _checkpoints(self):
        if self._folder is None or not os.path.isdir(self._folder):
            return set()
        return {name for name in os.listdir(self._folder)
                if name.startswith("step_") and os.path.isfile(os.path.join(self._folder, name, "manifest.json"))}

    def _note_pruned(self):
        if self._folder is None:
            return
        now = self._checkpoints()
        for name in sorted(self._known - now):
            step = name[len("step_"):]
            self.log.append("checkpoint.pruned", os.path.join(self._folder, name), "ok",
                            {"step": int(step) if step.isdigit() else None, "keep": self._keep,
                             "reason": "gone after a save (retention keeps the newest checkpoint.keep)"})
        self._known = now

    @property
    def enabled(self):
        return self.log is not None

    def record(self, action, target, result="ok", details=None):
        if self.log is None:
            return None
        self._flush_pending()
        return self.log.append(action, str(target), result, details)

    def checkpoint_saved(self, path, step=None):
        """checkpoint.saved with the SHA-256 of its manifest.json; a background save is recorded once its
        manifest exists (at the next record: the next save waits for the previous write)."""
        if self.log is None or not path:
            return
        self._pending.append((path, step))
        self._flush_pending()

    def _flush_pending(self):
        waiting = []
        for path, step in self._pending:
            manifest = os.path.join(path, "manifest.json")
            if os.path.isfile(manifest):
                self.log.append("checkpoint.saved", str(path), "ok",
                                {"manifest_sha256": file_digest(manifest), "step": step})
            else:
                waiting.append((path, step))
        self._pending = waiting
        self._note_pruned()

    def training_finished(self, path, step, val_loss=None):
        """checkpoint.saved (the final checkpoint) and training.finished."""
        self.checkpoint_saved(path, step)
        self.record("training.finished", path, details={
            "step": step, "val_loss": val_loss if val_loss is not None and math.isfinite(val_loss) else None})

    def training_stopped(self, path, step, cause):
        """checkpoint.saved (the preemption checkpoint) and training.stopped naming the signal."""
        self.checkpoint_saved(path, step)
        self.record("training.stopped", path, details={"step": step, "cause": cause})

    def training_failed(self, error, step=None):
        """training.failed with the error's first line (an audit failure here is only printed: the run's
        own error is the one reported)."""
        try:
            self.record("training.failed", "", "error", {"error": _one_line(error), "step": step})
        except (AuditError, OSError) as e:
            print(f"warning: the audit log did not take training.failed: {e}", file=sys.stderr, flush=True)

    def close(self):
        if self.log is not None:
            self._flush_pending()
            self.log.close()
            self.log = None


def key_path(explicit=None, environ=None):
    """The audit key's path: `explicit` (--audit-key) when given, else $MYRIAD_AUDIT_KEY_FILE, else None."""
    environ = os.environ if environ is None else environ
    return explicit or environ.get(KEY_FILE_ENV) or None


def trail(default_log, key_file=None, enabled=True, environ=None):
    """An AuditTrail writing to $MYRIAD_AUDIT_LOG (else `default_log`) under the configured key; a
    disabled one when `enabled` is false (ranks other than 0) or no key is configured (said once per
    process on stderr). Raises AuditError for a key or log that cannot be used."""
    environ = os.environ if environ is None else environ
    if not enabled:
        return AuditTrail()
    path = key_path(key_file, environ)
    if path is None:
        if not _said_no_key:
            _said_no_key.append(True)
            print(f"info: no audit key ({KEY_FILE_ENV} unset): the audit log is not written", file=sys.stderr,
                  flush=True)
        return AuditTrail()
    log_path = environ.get(LOG_ENV) or default_log
    return AuditTrail(AuditLog(log_path, load_key(path)))


# ---- the operations' records (one call per hook) ----

def _one_line(error):
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def start_training(config, rank, world, log_dir, resolved_yaml, step):
    """The training driver's trail (enabled on rank 0 with a key; log: $MYRIAD_AUDIT_LOG, else
    <logging.dir>/audit.jsonl) after its engine was built and any checkpoint loaded (`step`: the engine's
    step count then). Records training.started, or checkpoint.loaded and training.resumed, with the SHA-256
    of the resolved YAML, the layout, the world size and the steps to run."""
    trail_ = trail(os.path.join(log_dir, LOG_NAME), enabled=rank == 0)
    if not trail_.enabled:
        return trail_
    trail_.watch_checkpoints(config.resolved()["checkpoint.dir"], config["checkpoint.keep"])
    settled = config.for_world(world)
    layout = " x ".join(f"{axis} {settled[f'parallel.{axis}']}" for axis in ("dp", "tp", "pp", "cp", "ep"))
    details = {"config_sha256": hashlib.sha256(resolved_yaml.encode("utf-8")).hexdigest(),
               "layout": f"{layout}, zero {settled['parallel.zero_stage']}", "world": world,
               "steps": config["training.steps"], "start_step": step}
    resume = config["checkpoint.resume"]
    if resume and step > 0:
        checkpoint = resume
        if resume == "auto":
            checkpoint = os.path.join(config.resolved()["checkpoint.dir"], f"step_{step:08d}")
        manifest = os.path.join(checkpoint, "manifest.json")
        trail_.record("checkpoint.loaded", checkpoint, details={
            "manifest_sha256": file_digest(manifest) if os.path.isfile(manifest) else None, "step": step})
        trail_.record("training.resumed", log_dir, details=dict(details, checkpoint=checkpoint))
    else:
        trail_.record("training.started", log_dir, details=details)
    return trail_


def log_near(path):
    """The audit log of the run an artefact belongs to: PATH/audit.jsonl, PATH/../audit.jsonl or
    PATH/../../audit.jsonl, whichever exists first; else ./audit.jsonl."""
    path = os.path.abspath(path)
    for folder in (path, os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
        if os.path.isfile(os.path.join(folder, LOG_NAME)):
            return os.path.join(folder, LOG_NAME)
    return LOG_NAME


def conversion_log(args):
    """Where `myriad convert` records: $MYRIAD_AUDIT_LOG, else the audit log of the run an exported
    checkpoint belongs to (CHECKPOINT/../audit.jsonl or CHECKPOINT/../../audit.jsonl, whichever exists),
    else ./audit.jsonl."""
    if args.command == "export":
        return log_near(os.path.dirname(os.path.abspath(args.checkpoint_dir)))
    return LOG_NAME


def record_conversion(args, target, error=None):
    """model.exported / model.imported of `myriad convert` with the SHA-256 of its source and target
    (folder_digest for folders); result "error" and the error's first line when it failed. A no-op
    without a key."""
    trail_ = trail(conversion_log(args))
    if not trail_.enabled:
        return
    source = args.checkpoint_dir if args.command == "export" else args.paths[0]
    if not target:  # it failed before a result: the target named on the command line
        target = args.output if args.command == "export" else args.paths[-1]
    details = {"format": args.format, "source": source, "source_sha256": path_digest(source),
               "target_sha256": path_digest(target) if target and error is None else None}
    if args.command == "export" and args.format == "myriad" and error is None:
        config = os.path.splitext(target)[0] + ".yaml"
        details["config_sha256"] = path_digest(config)
    if error is not None:
        details["error"] = _one_line(error)
    action = "model.exported" if args.command == "export" else "model.imported"
    trail_.record(action, target or "", "ok" if error is None else "error", details)
    trail_.close()
