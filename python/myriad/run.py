"""Supervised launch: ``python -m myriad.run [options] -- mpirun ... python3 python/train.py ...``.

Runs the command; when it fails (a rank died, a node was lost, an error), logs the attempt with
its cause (exit code or signal; the driver's own `error: ...` report, which mpirun's MPI_ABORT
banner would otherwise push out of view; and the last lines the job printed to stderr) and starts it
again from the newest complete checkpoint — `--resume auto` is added to a train.py command that
does not choose a resume point itself — up to --max-restarts times, waiting --backoff seconds
doubled after each failure. Each attempt sees MYRIAD_ATTEMPT=<n> (0 first). A job that exits 0
(finished, or preempted with its checkpoint written) ends the supervision. Exit status: the
last attempt's. Progress lines go to stderr prefixed with "[myriad.run]" and to --log if given.

Deterministic failures are not restarted (the same command would fail the same way): exit code
2 — train.py's bad input (flags, config, data, a checkpoint to resume from) or
training.max_nonfinite_steps reached — also when a rank's MPI_Abort(2) reaches the supervisor
through mpirun (Open MPI 4's mpirun exits with the abort's error code; the supervisor also reads
mpirun's "MPI_ABORT was invoked on rank R ... with errorcode 2" line, in case a launcher maps
the code), and 126/127 (the command cannot be run or is not found). Everything else is retried:
3 (train.py's error during training), 1, any other code, and deaths by signal (SIGKILL of a
rank, a lost node, the watchdog's abort).
Because the data order and the sampling are functions of (seed, step, index), a restarted run
trains on exactly the batches the failed one would have: no step's data is skipped or repeated.

Elastic restarts (--hostfile FILE, an mpirun command): before every attempt the hostfile is read
again, and the job restarts on the hosts it lists (spares replacing lost ones), with parallel.dp
recomputed for the new world and the global batch kept (myriad/elastic.py); the supervisor logs
what changed.
"""
import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import threading
import time


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m myriad.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-restarts", type=int, default=3, help="restarts after failures (default 3)")
    parser.add_argument("--backoff", type=float, default=10.0,
                        help="seconds before the first restart, doubled after each (default 10)")
    parser.add_argument("--log", default=None, help="also append the supervisor's lines to this file")
    parser.add_argument("--hostfile", default=None,
                        help="elastic: the hosts to run on ('HOST slots=N [spare]' lines), read before every "
                             "attempt; the mpirun command is relaunched on them with dp recomputed")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the job's command line")
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command given (put it after --)")
    if args.max_restarts < 0 or args.backoff < 0:
        parser.error("--max-restarts and --backoff must be >= 0")
    return args


def runs_driver(command):
    """Whether the command runs the training driver: train.py, myriad-train, python -m myriad.train,
    or `myriad train` (also python -m myriad.cli train)."""
    for i, part in enumerate(command):
        if part.endswith(("train.py", "myriad-train")) or part == "myriad.train":
            return True
        if (os.path.basename(part) == "myriad" or part == "myriad.cli") and command[i + 1:i + 2] == ["train"]:
            return True
    return False


def with_resume(command):
    """The command with `--resume auto` appended when it runs train.py without a resume choice."""
    chooses = any(part == "--resume" or part.startswith("--resume=") or part.startswith("checkpoint.resume=")
                  for part in command)
    return command + ["--resume", "auto"] if runs_driver(command) and not chooses else command


# Exit codes that mean the same command would fail again, with why.
DETERMINISTIC = {
    2: "bad input (launch flags, configuration, data or checkpoint) or training.max_nonfinite_steps reached",
    126: "the command cannot be executed",
    127: "the command was not found",
}
MPI_ABORT = re.compile(r"MPI_ABORT was invoked on rank (\d+) in communicator \S+\s+with errorcode (-?\d+)")
# mpirun --tag-output / --timestamp-output put "[1,0]<stderr>:" (and a time) before a rank's lines.
RANK_TAG = re.compile(r"^(?:\[[^\]]*\]<stderr>:)?")
ERROR_LINES = 8  # the driver's error report kept for the summary: its first line and continuations


class ErrorReport:
    """The first `error: ...` report train.py printed on stderr (any rank) and its indented
    continuation lines: the real cause, which the MPI_ABORT text after it would hide."""

    def __init__(self):
        self.lines = []
        self.open = False

    def feed(self, line):
        text = RANK_TAG.sub("", line.rstrip("\n"), count=1)
        if not self.lines and text.startswith("error: "):
            self.lines.append(text[len("error: "):])
            self.open = True
        elif self.open and text.startswith("  ") and len(self.lines) < ERROR_LINES:
            self.lines.append(text)
        else:
            self.open = False


def deterministic_cause(code, abort_code):
    """Why the attempt would fail the same way again, or None when a restart may help. `abort_code`
    is the error code of an MPI_Abort that mpirun reported on stderr (None if none)."""
    if code in DETERMINISTIC:
        return f"exit code {code}: {DETERMINISTIC[code]}"
    if abort_code == 2:
        return f"a rank called MPI_Abort with error code {abort_code}: {DETERMINISTIC[abort_code]}"
    return None


def describe_exit(code):
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    if code > 128 and code - 128 in signal.valid_signals():
        return f"exit code {code} (a process ended by {signal.Signals(code - 128).name})"
    return f"exit code {code}"


def run_attempt(command, attempt, preempted, tail_lines=20):
    """Runs one attempt, streaming its output through; returns (exit code, last stderr lines, the
    error code of the first MPI_Abort mpirun reported or None, the lines of the first `error: ...`
    report of the driver — empty when there was none).
    SIGTERM / SIGUSR1 sent to the supervisor are passed on to the job (which checkpoints and
    exits) and recorded in `preempted`, so that the supervisor does not restart it."""
    env = dict(os.environ, MYRIAD_ATTEMPT=str(attempt))
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, errors="replace")

    def forward(signum, _frame):
        preempted.append(signal.Signals(signum).name)
        process.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, forward)
    tail = collections.deque(maxlen=tail_lines)
    aborts = []
    previous = [""]
    report = ErrorReport()

    def pump():
        for line in process.stderr:
            sys.stderr.write(line)
            tail.append(line.rstrip("\n"))
            report.feed(line)
            # mpirun wraps "... in communicator MPI_COMM_WORLD\nwith errorcode 2." over two lines.
            found = MPI_ABORT.search(previous[0] + " " + line.strip())
            if found and not aborts:
                aborts.append(int(found.group(2)))
            previous[0] = line.strip()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        code = process.wait()
    except KeyboardInterrupt:
        process.send_signal(signal.SIGTERM)
        code = process.wait()
    reader.join(timeout=5)
    return code, list(tail), (aborts[0] if aborts else None), list(report.lines)


class ElasticWorld:
    """The hostfile-driven world of an elastic job: plans each attempt's hosts and layout."""

    def __init__(self, hostfile, command):
        from . import _myriad, elastic

        self.hostfile, self.elastic, self.native = hostfile, elastic, _myriad
        found = elastic.driver_config(command)
        if found is None:
            raise ValueError("--hostfile needs the training driver's --config in the command")
        self.config_path, self.overrides = found
        hosts = elastic.read_hostfile(hostfile)
        first_world = None
        for i, word in enumerate(command[:-1]):
            if word in elastic.NP_FLAGS:
                first_world = int(command[i + 1])
        if first_world is None:
            first_world = sum(h.slots for h in hosts if not h.spare)
        resolved = self._resolved(first_world, [])
        if isinstance(resolved, str):
            raise ValueError(f"the first attempt's layout on {first_world} ranks: {resolved}")
        mp = resolved["parallel.tp"] * resolved["parallel.pp"] * resolved["parallel.cp"]
        self.first_world = first_world
        self.facts = elastic.LayoutFacts(
            mp, resolved["training.micro_batch"],
            resolved["training.micro_batch"] * resolved["training.gradient_accumulation"] * resolved["parallel.dp"])
        self.plan = None
        self.folder = os.path.dirname(os.path.abspath(hostfile))

    def _resolved(self, world, extra):
        try:
            config = self.native.Config.from_file(self.config_path)
            for item in [*self.overrides, *extra]:
                config.set(item)
            config.validate(world)
            return config.resolved()
        except self.native.Error as e:
            return str(e).split("] ", 1)[-1]

    def next_command(self, base):
        """The command for the next attempt (base: the original, or it with --resume auto), and the
        line saying what changed; ValueError when no layout fits the hosts."""
        elastic = self.elastic
        hosts = elastic.read_hostfile(self.hostfile)

        def accept(dp, micro, accum):
            got = self._resolved(dp * self.facts.model_parallel,
                                 [f"parallel.dp={dp}", f"training.micro_batch={micro}",
                                  f"training.gradient_accumulation={accum}"])
            return got if isinstance(got, str) else None

        plan = elastic.plan_world(hosts, self.facts, self.first_world, accept)
        change = elastic.describe_change(self.plan, plan)
        self.plan = plan
        path = os.path.join(self.folder, f".{os.path.basename(self.hostfile)}.mpirun")
        elastic.write_mpirun_hostfile(plan, path)
        return elastic.relaunch(base, plan, path), change


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def say(text):
        line = f"[myriad.run] {time.strftime('%Y-%m-%d %H:%M:%S')} {text}"
        print(line, file=sys.stderr, flush=True)
        if args.log:
            with open(args.log, "a") as f:
                f.write(line + "\n")

    command = args.command
    world = None
    if args.hostfile:
        try:
            world = ElasticWorld(args.hostfile, args.command)
            command, change = world.next_command(args.command)
        except (ValueError, OSError) as e:
            say(f"elastic: {e}")
            return 2
        say(f"elastic: {change}")
    preempted = []
    for attempt in range(args.max_restarts + 1):
        say(f"attempt {attempt + 1}/{args.max_restarts + 1}: {' '.join(command)}")
        code, tail, abort_code, error = run_attempt(command, attempt, preempted)
        if code == 0:
            say(f"attempt {attempt + 1} finished (exit code 0)")
            return 0
        if preempted:
            say(f"attempt {attempt + 1} ended after {preempted[0]} ({describe_exit(code)}): preempted, not restarting")
            return code
        cause = "\n".join("    " + line for line in tail[-8:]) or "    (no stderr output)"
        reason = ("; cause: " + "\n    ".join(error)) if error else ""
        say(f"attempt {attempt + 1} failed: {describe_exit(code)}{reason}; last stderr lines:\n{cause}")
        deterministic = deterministic_cause(code, abort_code)
        if deterministic:
            say(f"not restarting: {deterministic} - the same command would fail the same way; fix it and run again")
            return code if code > 0 else 128 - code
        if attempt == args.max_restarts:
            say(f"giving up after {attempt + 1} attempts")
            return code if code > 0 else 128 - code
        delay = args.backoff * (2 ** attempt)
        say(f"restarting from the newest checkpoint in {delay:.1f} s")
        time.sleep(delay)
        command = with_resume(args.command)
        if world is not None:
            try:
                command, change = world.next_command(command)
            except (ValueError, OSError) as e:
                say(f"elastic: not restarting: {e}")
                return code if code > 0 else 128 - code
            say(f"elastic: {change}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
