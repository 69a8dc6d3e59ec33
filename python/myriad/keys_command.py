"""`myriad keys`: the key file of encryption at rest (security.key_file / $MYRIAD_KEY_FILE; docs/security.md,
"Encryption at rest").

    myriad keys new FILE [--id ID]          add a fresh random 256-bit key to FILE (created 0600) and make it current
    myriad keys list FILE                   the key ids FILE holds and which one is current (never the keys)
    myriad keys rotate PATH... [--key-file FILE] [--dry-run]
                                            rewrap every encrypted file under PATH (files or folders, recursively)
                                            under FILE's current key
    myriad keys decrypt FILE OUT [--key-file FILE]
                                            write an encrypted artefact's plaintext to OUT: an explicit release in
                                            clear (e.g. an exported model.safetensors for another system)

A key file holds lines `key <id> <64 hex digits>` and one `current <id>`. New artefacts are
encrypted under the current key; any key in the file still reads what it encrypted. Rotation
(`new`, then `rotate`, then removing the old line) rewraps each file's own data key — the file's
header changes, its ciphertext is copied as it is, nothing is decrypted to disk — so rotating a
multi-GiB checkpoint costs one sequential copy and no plaintext. A file whose key the key file
lacks is an error naming it; files in clear are skipped and counted.
"""
import argparse
import os
import re
import secrets
import sys
import tempfile

import myriad._myriad as native
from myriad import audit

ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
KEY_FILE_ENV = "MYRIAD_KEY_FILE"


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def entries(lines):
    """(ids in file order, the current id or None)."""
    ids, current = [], None
    for line in lines:
        words = line.split("#", 1)[0].split()
        if len(words) == 3 and words[0] == "key":
            ids.append(words[1])
        elif len(words) == 2 and words[0] == "current":
            current = words[1]
    if current is None and len(ids) == 1:
        current = ids[0]
    return ids, current


def write_private(path, lines):
    """Replaces `path` atomically with `lines`, mode 0600."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, staged = tempfile.mkstemp(prefix=".keys-", dir=folder)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(staged, path)
    except BaseException:
        if os.path.exists(staged):
            os.unlink(staged)
        raise


def new_key(path, key_id=None):
    lines = read_lines(path)
    ids, _ = entries(lines)
    if key_id is None:
        n = len(ids) + 1
        while f"k{n}" in ids:
            n += 1
        key_id = f"k{n}"
    if not ID.match(key_id):
        raise ValueError(f"--id {key_id!r}: 1-64 letters, digits, '.', '_' or '-'")
    if key_id in ids:
        raise ValueError(f"{path}: key {key_id!r} exists already")
    kept = [line for line in lines if line.split("#", 1)[0].split()[:1] != ["current"]]
    if not lines:
        kept = ["# myriad encryption keys (docs/security.md): keep this file secret, back it up apart from the data"]
    write_private(path, kept + [f"key {key_id} {secrets.token_hex(32)}", f"current {key_id}"])
    return key_id


def encrypted_files(paths):
    """Every file under `paths` (files or folders), sorted; (path, key id or None for clear)."""
    found = []
    for root in paths:
        if os.path.isfile(root):
            candidates = [root]
        elif os.path.isdir(root):
            candidates = [os.path.join(d, name) for d, _, names in os.walk(root) for name in names]
        else:
            raise FileNotFoundError(f"{root}: no such file or folder")
        for path in sorted(candidates):
            if os.path.isfile(path) and not os.path.islink(path):
                found.append((path, native.encrypted_file_key_id(path)))
    return found


def rotate(paths, key_file, dry_run=False, out=sys.stdout):
    """Rewraps; records keys.rotated (audit log near the first path, or $MYRIAD_AUDIT_LOG) with the
    key ids, never the keys."""
    _, current = entries(read_lines(key_file))
    files = encrypted_files(paths)
    trail = audit.trail(audit.log_near(paths[0]), enabled=not dry_run)
    rewrapped = already = clear = 0
    previous = set()
    try:
        for path, key_id in files:
            if key_id is None:
                clear += 1
            elif key_id == current:
                already += 1
            else:
                if not dry_run:
                    native.rewrap_file(path, key_file)
                print(f"{'would rewrap' if dry_run else 'rewrapped'} {path}: {key_id} -> {current}", file=out)
                rewrapped += 1
                previous.add(key_id)
    except Exception as e:
        trail.record("keys.rotated", " ".join(paths), "error",
                     {"to_key_id": current, "rewrapped": rewrapped, "error": str(e).splitlines()[0]})
        trail.close()
        raise
    trail.record("keys.rotated", " ".join(paths), "ok",
                 {"to_key_id": current, "from_key_ids": sorted(previous), "rewrapped": rewrapped,
                  "already": already, "clear": clear})
    trail.close()
    print(f"keys rotate: {rewrapped} file(s) {'to rewrap' if dry_run else 'rewrapped'} under {current!r}, "
          f"{already} already under it, {clear} in clear (left as they are)", file=out)
    return rewrapped


def decrypt(path, out, key_file):
    """OUT <- the plaintext of PATH; recorded as keys.decrypted (the audit log near PATH, or $MYRIAD_AUDIT_LOG)."""
    key_id = native.encrypted_file_key_id(path)
    if key_id is None:
        raise ValueError(f"{path}: not an encrypted myriad file (nothing to decrypt)")
    trail = audit.trail(audit.log_near(os.path.dirname(os.path.abspath(path))))
    try:
        size = native.decrypt_file(path, out, key_file)
    except Exception as e:
        trail.record("keys.decrypted", path, "error", {"key_id": key_id, "out": out, "error": str(e).splitlines()[0]})
        trail.close()
        raise
    trail.record("keys.decrypted", path, "ok", {"key_id": key_id, "out": out, "bytes": size,
                                                 "out_sha256": audit.file_digest(out)})
    trail.close()
    return size


def main(argv=None):
    parser = argparse.ArgumentParser(prog="myriad keys", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    new = sub.add_parser("new", help="add a fresh key and make it current")
    new.add_argument("file")
    new.add_argument("--id", help="the new key's id (default k<N>)")
    listing = sub.add_parser("list", help="the key ids and the current one")
    listing.add_argument("file")
    rot = sub.add_parser("rotate", help="rewrap encrypted files under the key file's current key")
    rot.add_argument("paths", nargs="+", metavar="PATH")
    rot.add_argument("--key-file", help=f"the key file (default ${KEY_FILE_ENV})")
    rot.add_argument("--dry-run", action="store_true", help="list what would be rewrapped; change nothing")
    dec = sub.add_parser("decrypt", help="write an encrypted artefact's plaintext (an explicit release in clear)")
    dec.add_argument("file")
    dec.add_argument("out")
    dec.add_argument("--key-file", help=f"the key file (default ${KEY_FILE_ENV})")
    args = parser.parse_args(argv)
    try:
        if args.action == "new":
            key_id = new_key(args.file, args.id)
            print(f"{args.file}: added key {key_id!r}, now current (mode 0600)")
        elif args.action == "list":
            ids, current = entries(read_lines(args.file))
            if not ids:
                raise ValueError(f"{args.file}: holds no key")
            for key_id in ids:
                print(f"{key_id}{'  (current)' if key_id == current else ''}")
        else:
            key_file = args.key_file or os.environ.get(KEY_FILE_ENV)
            if not key_file:
                raise ValueError(f"no key file: give --key-file FILE or set ${KEY_FILE_ENV}")
            if args.action == "rotate":
                rotate(args.paths, key_file, args.dry_run)
            else:
                size = decrypt(args.file, args.out, key_file)
                print(f"{args.out}: {size} bytes in clear, decrypted from {args.file}")
    except (ValueError, OSError, RuntimeError, audit.AuditError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
