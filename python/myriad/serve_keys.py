"""`myriad serve keys`: the API keys of `myriad serve --auth FILE` (docs/security.md, "Access to the server").

    myriad serve keys add FILE --id ID --role ROLE [--role ROLE ...] [--rate PER_SECOND] [--burst N]
    myriad serve keys list FILE
    myriad serve keys revoke FILE --id ID

`add` draws a key (myr_<id>_<64 hex digits>), prints it once on stdout and stores only its scrypt
hash (n 16384, r 8, p 1, a random 16-byte salt; what myriad-serve checks with OpenSSL's
EVP_PBE_scrypt). Roles: viewer, user, operator, admin (serve/access_policy.h lists what each may
do). The file is created with mode 0600 and replaced atomically; a running server picks changes
up on `POST /admin/keys/reload` (an admin key) or a restart.
"""
import argparse
import datetime
import hashlib
import json
import os
import re
import secrets
import sys
import tempfile

FORMAT = "myriad-serve-keys-v1"
ROLES = ("viewer", "user", "operator", "admin")
SCRYPT = {"n": 16384, "r": 8, "p": 1}
ID = re.compile(r"^[A-Za-z0-9.-]{1,64}$")


def scrypt_hash(token, salt, n, r, p):
    return hashlib.scrypt(token.encode(), salt=salt, n=n, r=r, p=p, maxmem=128 * r * n + (1 << 20), dklen=32)


def load(path):
    if not os.path.exists(path):
        return {"format": FORMAT, "public": ["/health", "/ready"], "keys": []}
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: format is not {FORMAT}")
    return doc


def save(path, doc):
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".keys-")  # mode 0600
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def add(path, key_id, roles, rate=0.0, burst=None):
    """Adds a key; returns its token (the only time it is shown)."""
    if not ID.match(key_id):
        raise ValueError(f"--id {key_id!r}: 1-64 letters, digits, '-' or '.'")
    for role in roles:
        if role not in ROLES:
            raise ValueError(f"--role {role!r}: one of {', '.join(ROLES)}")
    doc = load(path)
    if any(k["id"] == key_id for k in doc["keys"]):
        raise ValueError(f"{path}: key {key_id!r} exists (revoke it first)")
    token = f"myr_{key_id}_{secrets.token_hex(32)}"
    salt = secrets.token_bytes(16)
    entry = {"id": key_id, "roles": list(dict.fromkeys(roles)),
             "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
             "scrypt": {**SCRYPT, "salt": salt.hex(), "hash": scrypt_hash(token, salt, **SCRYPT).hex()}}
    if rate > 0:
        entry["rate_limit"] = {"per_second": rate, "burst": burst if burst else max(1.0, rate)}
    doc["keys"].append(entry)
    save(path, doc)
    return token


def revoke(path, key_id):
    doc = load(path)
    kept = [k for k in doc["keys"] if k["id"] != key_id]
    if len(kept) == len(doc["keys"]):
        raise ValueError(f"{path}: no key {key_id!r}")
    doc["keys"] = kept
    save(path, doc)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="myriad serve keys", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("add", help="draw a key, print it once, store its hash")
    a.add_argument("file")
    a.add_argument("--id", required=True)
    a.add_argument("--role", action="append", required=True, choices=ROLES)
    a.add_argument("--rate", type=float, default=0.0, help="requests per second (0: no limit)")
    a.add_argument("--burst", type=float, default=None)
    listing = sub.add_parser("list", help="key ids, roles and rate limits (never hashes)")
    listing.add_argument("file")
    r = sub.add_parser("revoke", help="remove a key")
    r.add_argument("file")
    r.add_argument("--id", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "add":
            print(add(args.file, args.id, args.role, args.rate, args.burst))
            print(f"key {args.id!r} added to {args.file}; the key above is not stored anywhere: keep it",
                  file=sys.stderr)
        elif args.command == "list":
            for k in load(args.file)["keys"]:
                limit = k.get("rate_limit", {}).get("per_second", 0)
                print(f"{k['id']}\t{','.join(k['roles'])}\t{f'{limit}/s' if limit else 'no limit'}\t"
                      f"{k.get('created', '')}")
        else:
            revoke(args.file, args.id)
            print(f"key {args.id!r} revoked in {args.file}", file=sys.stderr)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: myriad serve keys: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
