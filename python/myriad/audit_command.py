"""`myriad audit`: check and read an audit log (myriad/audit.py, docs/security.md).

    myriad audit verify LOG [--audit-key FILE]
    myriad audit show LOG [--actor X] [--action Y] [--since ISO] [--until ISO] [--json]

verify walks the hash chain and the MACs; exit code 0 intact (`LOG: intact, N records, final hash H`),
1 tampered (one line: `LOG: record N: <kind> — <why>`), 2 bad input (no key, unreadable file).
show prints the records that match every filter given, one a line (`--json`: the records as
stored); it does not verify — run verify for that.
"""
import argparse
import datetime
import fnmatch
import json
import sys

from . import audit

EXIT_INTACT, EXIT_TAMPERED, EXIT_BAD_INPUT = 0, 1, 2


def parse_time(text):
    """An ISO 8601 time (a date, or date and time; 'Z' or an offset; none = UTC) as an aware datetime."""
    value = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)


def iso_time(text):
    try:
        return parse_time(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an ISO 8601 time (e.g. 2026-12-04 or "
                                         f"2026-12-04T19:15:00Z)") from None


def matches(record, actor=None, action=None, since=None, until=None):
    """Whether `record` passes the filters: actor equals its os_user, host, user@host or api_key_id;
    action equals its action, or is a glob (checkpoint.*) or a prefix up to a dot (checkpoint);
    since <= time < until."""
    if actor is not None:
        who = record.get("actor") or {}
        names = {who.get("os_user"), who.get("host"), f"{who.get('os_user')}@{who.get('host')}", who.get("api_key_id")}
        if actor not in names:
            return False
    if action is not None:
        name = str(record.get("action"))
        if not (name == action or fnmatch.fnmatchcase(name, action) or name.startswith(action + ".")):
            return False
    if since is not None or until is not None:
        try:
            when = parse_time(record["time"])
        except (KeyError, TypeError, ValueError):
            return False
        if (since is not None and when < since) or (until is not None and when >= until):
            return False
    return True


def show_line(record):
    who = record.get("actor") or {}
    actor = f"{who.get('os_user')}@{who.get('host')}"
    if who.get("api_key_id"):
        actor += f" key:{who['api_key_id']}"
    details = json.dumps(record.get("details") or {}, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return (f"{record.get('seq'):>5} {record.get('time')} {actor} {record.get('action')} {record.get('target')} "
            f"{record.get('result')} {details}")


def verify_command(args):
    path = audit.key_path(args.audit_key)
    if path is None:
        print(f"error: no audit key: give --audit-key FILE or set {audit.KEY_FILE_ENV}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        key = audit.load_key(path)
        result = audit.verify(args.log, key)
    except audit.AuditError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as e:
        print(f"error: audit log '{args.log}' cannot be read: {e.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not result.ok:
        print(f"{args.log}: {result.problem.message}")
        return EXIT_TAMPERED
    print(f"{args.log}: intact, {result.records} records, final hash {result.final_hash}")
    return EXIT_INTACT


def show_command(args):
    try:
        with open(args.log, "rb") as f:
            lines = f.read().split(b"\n")
    except OSError as e:
        print(f"error: audit log '{args.log}' cannot be read: {e.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
            if not isinstance(record, dict):
                raise ValueError
        except ValueError:
            print(f"{args.log}: record {number}: not a JSON record (skipped)", file=sys.stderr)
            continue
        if matches(record, args.actor, args.action, args.since, args.until):
            print(line.decode("utf-8") if args.json else show_line(record))
    return EXIT_INTACT


def main(argv=None):
    parser = argparse.ArgumentParser(prog="myriad audit", description="check and read a myriad audit log "
                                     "(docs/security.md)")
    sub = parser.add_subparsers(dest="command", required=True)
    verify = sub.add_parser("verify", help="check the hash chain and MACs: exit 0 intact, 1 tampered (the first "
                            "bad record and its kind), 2 bad input")
    verify.add_argument("log", metavar="LOG")
    verify.add_argument("--audit-key", metavar="FILE", help=f"the audit key (default: ${audit.KEY_FILE_ENV})")
    show = sub.add_parser("show", help="print the records that match the filters (does not verify)")
    show.add_argument("log", metavar="LOG")
    show.add_argument("--actor", help="an OS user, host, user@host or API key id")
    show.add_argument("--action", help="an action (checkpoint.saved), a prefix (checkpoint) or a glob (training.*)")
    show.add_argument("--since", type=iso_time, metavar="ISO", help="records at or after this time (UTC if no zone)")
    show.add_argument("--until", type=iso_time, metavar="ISO", help="records before this time (UTC if no zone)")
    show.add_argument("--json", action="store_true", help="print the records as stored")
    args = parser.parse_args(argv)
    return verify_command(args) if args.command == "verify" else show_command(args)


if __name__ == "__main__":
    sys.exit(main())
