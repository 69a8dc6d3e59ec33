"""Slurm batch scripts for a planned run: ``python -m myriad.operations.sbatch --config plan.yaml --nodes 4
--gpus-per-node 8 [...] > job.sbatch``.

`render_sbatch(SbatchRequest)` returns the text of a bash batch script that launches the training
driver (`python3 -m myriad.train --config FILE --resume auto [--set ...]`) on every GPU of the
allocation and survives preemption (docs/planning.md, "Slurm batch scripts"):

- **Ranks and GPUs.** One task per GPU (`--ntasks-per-node` = `--gpus-per-node`), consecutive ranks
  on one node (srun `--distribution=block`, mpirun `--map-by ppr:G:node`) so tensor-parallel groups
  stay inside a node. Every task sees all GPUs of its node (`--gpu-bind=none`): the driver picks
  device L for local rank L (SLURM_LOCALID under srun, OMPI_COMM_WORLD_LOCAL_RANK under mpirun;
  core/local_device.h), so a task bound to one GPU would find only device 0 and local ranks >= 1
  would be refused.
- **Stop and requeue.** `#SBATCH --signal=B:USR1@LEAD` sends SIGUSR1 to the batch shell alone LEAD
  seconds before the time limit; the shell runs the launcher in the background, traps USR1 (and
  the TERM of a preemption, scancel or the time limit) and forwards SIGUSR1 to the launcher (srun
  and mpirun both pass SIGUSR1 on to every rank), whose ranks stop at the next step boundary, write
  a checkpoint and exit 0. The shell then compares the step of the checkpoint `latest` names with
  training.steps: a run stopped by USR1 that made progress and is not finished is requeued
  (`scontrol requeue $SLURM_JOB_ID`, and `--resume auto` continues it); a finished run, a failure
  and a TERM are never requeued by the script (Slurm itself requeues a job it preempts when the
  job has `--requeue` and PreemptMode=REQUEUE; a scancel stays cancelled). The decision is the
  bash function REQUEUE_DECISION_BASH, tested on its own and inside the script.
- **Checked before writing.** The config with the --set overrides passes the engine's own
  validation at nodes x ranks-per-node ranks (every key; the layout must fill the world: parallel.dp
  0 (auto) is the rest of the world over tp * pp * cp, and parallel.ep must divide dp). Errors are
  ValueErrors with the engine's message, naming the key.

The config is read and checked by the engine's own parser (`myriad.Config`), never re-read here.
"""
import argparse
import dataclasses
import re
import shlex
import sys
from typing import Dict, Optional, Sequence

LAUNCHERS = ("srun", "mpirun")
SIGNALS = ("USR1", "TERM")

# The requeue decision, a pure bash function (no side effects): the script runs it after the
# launcher has exited. Arguments: the launcher's exit code, the stop signal the batch shell
# received (USR1, TERM or ""), the checkpoint step before and after the launch (-1 = none) and
# training.steps. Prints one word:
#   finished     exit 0 and the newest checkpoint is at training.steps: done, never requeued
#   preempted    Slurm selected the job for preemption (PREEMPTED = 1: its PreemptTime is set, at or
#                after this run's start): the ranks got SIGTERM and checkpointed; requeued now with
#                scontrol requeue (a job that ends on its own inside GraceTime is marked COMPLETED
#                by Slurm and would never be requeued)
#   stopped      a TERM reached the batch shell without a preemption (scancel, the time limit): not
#                requeued
#   failed       a non-zero exit without TERM: the job fails with that code (myriad.run, when used,
#                has already restarted it); not requeued
#   unexpected   exit 0, not finished, no signal seen by the shell (a signal sent to the job steps
#                only, or a checkpoint folder other than CHECKPOINT_DIR): not requeued, exit 1
#   no_progress  stopped by USR1 without a newer checkpoint: requeueing would loop; exit 1
#   requeue      stopped by USR1 with a newer checkpoint, not finished: scontrol requeue
REQUEUE_DECISION_BASH = """\
requeue_decision() {  # EXIT_CODE STOP_SIGNAL START_STEP END_STEP TRAINING_STEPS PREEMPTED
  local code=$1 stop=$2 start=$3 end=$4 steps=$5 preempted=${6:-0}
  if [ "$code" -eq 0 ] && [ "$end" -ge "$steps" ]; then echo finished; return; fi
  if [ "$preempted" = 1 ]; then echo preempted; return; fi
  if [ "$stop" = TERM ]; then echo stopped; return; fi
  if [ "$code" -ne 0 ]; then echo failed; return; fi
  if [ "$stop" != USR1 ]; then echo unexpected; return; fi
  if [ "$end" -le "$start" ]; then echo no_progress; return; fi
  echo requeue
}
"""

# 1 when Slurm has selected this run of the job for preemption: `scontrol show job` gives a
# PreemptTime at or after the run's StartTime (a requeued job keeps its old PreemptTime).
JOB_PREEMPTED_BASH = """\
job_preempted() {
  local info preempt start
  info=$(scontrol show job "${SLURM_JOB_ID:-none}" 2> /dev/null) || { echo 0; return; }
  preempt=$(printf '%s\\n' "$info" | grep -o 'PreemptTime=[^ ]*' | head -1)
  start=$(printf '%s\\n' "$info" | grep -o 'StartTime=[^ ]*' | head -1)
  preempt=${preempt#PreemptTime=}
  start=${start#StartTime=}
  case "$preempt" in None | Unknown | "") echo 0; return ;; esac
  if [[ "$preempt" < "$start" ]]; then echo 0; else echo 1; fi
}
"""

# The step of the checkpoint `latest` names in CHECKPOINT_DIR (a line "step_<digits>",
# train/checkpoint/checkpoint_folder.h), -1 when there is none.
NEWEST_STEP_BASH = """\
newest_checkpoint_step() {
  local name=""
  if [ -r "$CHECKPOINT_DIR/latest" ]; then IFS= read -r name < "$CHECKPOINT_DIR/latest" || true; fi
  case "$name" in
    step_*[!0-9]* | step_ | "") echo -1 ;;
    step_*) echo $((10#${name#step_})) ;;
    *) echo -1 ;;
  esac
}
"""

# Runs the launcher in the background so that traps run while it works; every USR1/TERM is
# forwarded to it as SIGUSR1 (TERM to mpirun would end the job with exit 1, USR1 is passed on
# to the ranks, docs/checkpoints.md). A trapped signal interrupts `wait`, so it is repeated until
# the launcher has really ended (bash keeps a finished child's status for later waits).
LAUNCH_AND_DECIDE_BASH = """\
stop_signal=""
interrupted=0
launcher_pid=""
# shellcheck disable=SC2317  # run by the traps below
forward_stop() {
  interrupted=1
  if [ "$1" = TERM ] || [ -z "$stop_signal" ]; then stop_signal=$1; fi
  echo "[myriad-sbatch] SIG$1: asking the ranks to checkpoint and stop (SIGUSR1 to the launcher)"
  if [ -n "$launcher_pid" ]; then kill -USR1 "$launcher_pid" 2>/dev/null || true; fi
}
trap 'forward_stop USR1' USR1
trap 'forward_stop TERM' TERM

start_step=$(newest_checkpoint_step)
echo "[myriad-sbatch] job ${SLURM_JOB_ID:-?} (restart ${SLURM_RESTART_COUNT:-0}): checkpoint step" \\
  "$start_step of $TRAINING_STEPS in $CHECKPOINT_DIR"
"${LAUNCH[@]}" &
launcher_pid=$!
if [ -n "$stop_signal" ]; then kill -USR1 "$launcher_pid" 2>/dev/null || true; fi  # a signal before the launch
while :; do
  interrupted=0
  wait "$launcher_pid"
  code=$?
  [ "$interrupted" = 1 ] || break
done
end_step=$(newest_checkpoint_step)
preempted=0
if [ "$code" -ne 0 ] || [ "$end_step" -lt "$TRAINING_STEPS" ]; then preempted=$(job_preempted); fi
decision=$(requeue_decision "$code" "$stop_signal" "$start_step" "$end_step" "$TRAINING_STEPS" "$preempted")
echo "[myriad-sbatch] launcher exit code $code, stop signal ${stop_signal:-none}, checkpoint step" \\
  "$start_step -> $end_step of $TRAINING_STEPS: $decision"
case "$decision" in
  finished) exit 0 ;;
  requeue | preempted)
    if scontrol requeue "$SLURM_JOB_ID"; then exit 0; fi
    echo "[myriad-sbatch] scontrol requeue $SLURM_JOB_ID failed; resubmit this script (it resumes)" >&2
    exit 1 ;;
  stopped) exit "$code" ;;
  failed) exit "$code" ;;
  unexpected)
    echo "[myriad-sbatch] the run ended with exit code 0 before training.steps and the batch shell saw no" \\
      "signal (to checkpoint and requeue, signal the batch shell: scancel --batch --signal=USR1" \\
      "${SLURM_JOB_ID:-JOBID}); not requeued" >&2
    exit 1 ;;
  no_progress)
    echo "[myriad-sbatch] stopped by SIGUSR1 without a checkpoint newer than step $start_step; not" \\
      "requeued (raise the time limit or --signal lead time)" >&2
    exit 1 ;;
  *) exit 1 ;;
esac
"""


@dataclasses.dataclass
class SbatchRequest:
    """What the batch script launches and asks of Slurm.

    gpus_per_node: GPUs per node, one rank each; 0 = a CPU run (no GPU request), whose ranks per
    node are `tasks_per_node` (required then; with GPUs it must be left out or equal them).

    config: the run's YAML (the planner's, ready to run), passed to the driver as given (relative
    paths are relative to the job's working directory: `workdir`, else the submit directory).
    switches / switches_wait: topology hint `#SBATCH --switches=N[@wait]` — at most N leaf switches
    (with the tree topology plugin), waiting at most `switches_wait` (Slurm time) for them before
    taking any allocation; None = no hint.
    signal_lead_s: seconds before the time limit at which the batch shell gets SIGUSR1 (Slurm may
    send it up to 60 s earlier); it must cover one training step plus a checkpoint save.
    cpus_per_task: CPU cores per rank (OMP_NUM_THREADS); None = Slurm's default (1), threads 1.
    restarts: > 0 wraps the launcher in `python -m myriad.run --max-restarts N` (in-allocation
    restarts of failures from the newest checkpoint).
    sweep: "KEY=V1,V2,..." makes the script a job array (`--array=0-N`): task i runs with KEY=Vi in
    a run folder of its own, <logging.dir>/sweep_<i> (logs, metrics, data cache and checkpoints;
    each task requeues and resumes on its own).
    setup: shell lines run before the launch (module load, source venv/bin/activate, ...).
    environment: variables exported to every rank (also passed with -x under mpirun).
    """
    config: str
    nodes: int
    gpus_per_node: int
    tasks_per_node: Optional[int] = None
    job_name: str = "myriad"
    time_limit: str = "24:00:00"
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    switches: Optional[int] = None
    switches_wait: Optional[str] = None
    output_dir: str = "."
    workdir: Optional[str] = None
    overrides: Sequence[str] = ()
    launcher: str = "srun"
    signal_lead_s: int = 180
    cpus_per_task: Optional[int] = None
    exclusive: bool = True
    restarts: int = 0
    restart_backoff_s: float = 30.0
    python: str = "python3"
    sweep: Optional[str] = None
    setup: Sequence[str] = ()
    environment: Dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """What the script needs from the config: the layout, training.steps and the checkpoint folder."""
    tp: int
    pp: int
    cp: int
    dp: int  # resolved (auto replaced by the world's share)
    ep: int
    steps: int
    checkpoint_dir: str
    logging_dir: str


def parse_time_limit(text):
    """Seconds of a Slurm time limit: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; ValueError otherwise."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", str(text).strip())
    if not match or str(text).strip() in ("", "0"):
        raise ValueError(f"time_limit: '{text}' is not a Slurm time (M, M:S, H:M:S, D-H, D-H:M or D-H:M:S), "
                         "or is 0")
    days, a, b, c = match.groups()
    a, b, c = int(a), None if b is None else int(b), None if c is None else int(c)
    if days is not None:  # D-H, D-H:M, D-H:M:S
        return int(days) * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    if c is not None:  # H:M:S
        return a * 3600 + b * 60 + c
    if b is not None:  # M:S
        return a * 60 + b
    return a * 60  # M


def run_facts(config_path, overrides, nodes, ranks_per_node):
    """RunFacts of the config file with the --set overrides, launched on nodes x ranks_per_node ranks:
    the engine's own parser and checks (every key, the layout against the world), so a job that the
    engine would refuse at start-up is refused here, before it waits in the queue; ValueError with
    the engine's message (naming the key) otherwise."""
    from .. import _myriad

    world = nodes * ranks_per_node
    try:
        config = _myriad.Config.from_file(config_path)
        for item in overrides:
            config.set(item)
        config.validate(world)
    except _myriad.Error as e:
        reason = str(e).split("] ", 1)[-1]
        raise ValueError(f"{config_path} on nodes x ranks per node = {nodes} x {ranks_per_node} = {world} ranks: "
                         f"{reason}") from None
    resolved = config.resolved()
    tp, pp, cp, ep = (resolved[f"parallel.{k}"] for k in ("tp", "pp", "cp", "ep"))
    dp = resolved["parallel.dp"]  # validate() settled auto (0) to the world's share
    return RunFacts(tp, pp, cp, dp, ep, resolved["training.steps"], resolved["checkpoint.dir"], resolved["logging.dir"])


def parse_sweep(text):
    """(key, [values]) of a sweep "KEY=V1,V2,..." (at least two values); ValueError otherwise."""
    key, sep, values = str(text).partition("=")
    items = [v.strip() for v in values.split(",")]
    if not sep or not key.strip() or len(items) < 2 or any(not v or re.search(r"\s", v) for v in items):
        raise ValueError(f"sweep: '{text}' is not KEY=V1,V2,... (a config key and at least two values without "
                         "spaces)")
    return key.strip(), items


def ranks_per_node(r):
    """Ranks per node: one per GPU, or tasks_per_node for a CPU run."""
    return r.tasks_per_node if r.gpus_per_node == 0 else r.gpus_per_node


def _check_request(r):
    for name, least in (("nodes", 1), ("gpus_per_node", 0)):
        value = getattr(r, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    tasks = r.tasks_per_node
    if tasks is not None and (isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1):
        raise ValueError(f"tasks_per_node must be an integer >= 1, got {tasks!r}")
    if r.gpus_per_node == 0 and tasks is None:
        raise ValueError("gpus_per_node 0 is a CPU run: give its ranks per node with tasks_per_node")
    if r.gpus_per_node > 0 and tasks is not None and tasks != r.gpus_per_node:
        raise ValueError(f"tasks_per_node {tasks} differs from gpus_per_node {r.gpus_per_node}: a GPU run has one "
                         "rank per GPU (leave tasks_per_node out)")
    if r.launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got '{r.launcher}'")
    for name in ("job_name", "partition", "account", "qos", "output_dir", "workdir", "switches_wait"):
        value = getattr(r, name)
        if value is not None and (not str(value) or re.search(r"\s", str(value))):
            raise ValueError(f"{name} must be non-empty without spaces (an #SBATCH value), got '{value}'")
    limit = parse_time_limit(r.time_limit)
    if not 0 <= r.signal_lead_s < min(limit, 65536):
        raise ValueError(f"signal_lead_s must be in [0, the time limit {limit} s) and at most 65535, "
                         f"got {r.signal_lead_s}")
    if r.switches is not None and (not isinstance(r.switches, int) or r.switches < 1):
        raise ValueError(f"switches must be an integer >= 1, got {r.switches!r}")
    if r.switches_wait is not None:
        if r.switches is None:
            raise ValueError("switches_wait needs switches (the hint is --switches=N@WAIT)")
        parse_time_limit(r.switches_wait)
    if r.cpus_per_task is not None and (not isinstance(r.cpus_per_task, int) or r.cpus_per_task < 1):
        raise ValueError(f"cpus_per_task must be an integer >= 1, got {r.cpus_per_task!r}")
    if not isinstance(r.restarts, int) or r.restarts < 0:
        raise ValueError(f"restarts must be an integer >= 0, got {r.restarts!r}")
    for key in r.environment:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"environment: '{key}' is not a variable name")


def sbatch_directives(r):
    """The #SBATCH lines of a request, in order."""
    lines = [f"--job-name={r.job_name}", f"--nodes={r.nodes}", f"--ntasks-per-node={ranks_per_node(r)}"]
    if r.gpus_per_node > 0:
        lines.append(f"--gpus-per-node={r.gpus_per_node}")
    if r.cpus_per_task is not None:
        lines.append(f"--cpus-per-task={r.cpus_per_task}")
    if r.exclusive:
        lines.append("--exclusive")
    lines.append(f"--time={r.time_limit}")
    for name in ("partition", "account", "qos"):
        if getattr(r, name):
            lines.append(f"--{name}={getattr(r, name)}")
    if r.switches is not None:
        lines.append(f"--switches={r.switches}" + (f"@{r.switches_wait}" if r.switches_wait else ""))
    if r.workdir:
        lines.append(f"--chdir={r.workdir}")
    log_name = "%x-%j.out"
    if r.sweep:
        lines.append(f"--array=0-{len(parse_sweep(r.sweep)[1]) - 1}")
        log_name = "%x-%A_%a.out"  # one log per task: array id, task index
    lines += [f"--output={r.output_dir.rstrip('/') or '/'}/{log_name}", "--open-mode=append", "--requeue",
              f"--signal=B:USR1@{r.signal_lead_s}"]
    return ["#SBATCH " + line for line in lines]


def launch_command(r, world):
    """The launcher's argv (a list of words, unquoted)."""
    driver = [r.python, "-m", "myriad.train", "--config", r.config, "--resume", "auto"]
    for override in r.overrides:
        driver += ["--set", override]
    ranks = ranks_per_node(r)
    if r.launcher == "srun":
        launch = ["srun", "--mpi=pmix", "--distribution=block"] + (["--gpu-bind=none"] if r.gpus_per_node else [])
        launch += ["--kill-on-bad-exit=1", f"--ntasks-per-node={ranks}"]
        if r.cpus_per_task is not None:  # srun does not inherit sbatch's --cpus-per-task (Slurm >= 22.05)
            launch.append(f"--cpus-per-task={r.cpus_per_task}")
    else:
        launch = ["mpirun", "-np", str(world), "--map-by", f"ppr:{ranks}:node", "--rank-by", "slot",
                  "--bind-to", "none"]
        for name in ["OMP_NUM_THREADS", "PYTHONPATH"] + sorted(r.environment):
            launch += ["-x", name]
    supervisor = []
    if r.restarts:
        supervisor = [r.python, "-m", "myriad.run", "--max-restarts", str(r.restarts), "--backoff",
                      f"{r.restart_backoff_s:g}", "--"]
    return supervisor + launch + driver


def _layout_notes(facts, r):
    ranks = ranks_per_node(r)
    notes = [f"# layout: world {r.nodes * ranks} = tp {facts.tp} x cp {facts.cp} x dp {facts.dp} "
             f"x pp {facts.pp} (ep {facts.ep} inside dp); ranks {ranks} per node, consecutive"]
    if facts.tp > ranks or ranks % facts.tp:
        notes.append(f"# note: tp {facts.tp} does not divide the {ranks} ranks of a node, so some "
                     "tensor-parallel groups span nodes (every layer's all-reduce crosses the network)")
    return notes


def render_sbatch(request):
    """The batch script's text for `request` (an SbatchRequest); ValueError naming the field or the
    config key when the request or the layout is wrong."""
    r = request
    _check_request(r)
    world = r.nodes * ranks_per_node(r)
    facts = run_facts(r.config, r.overrides, r.nodes, ranks_per_node(r))
    sweep_key, sweep_values = parse_sweep(r.sweep) if r.sweep else (None, [])
    for value in sweep_values:  # every task's config passes the engine's checks too
        run_facts(r.config, [*r.overrides, f"{sweep_key}={value}"], r.nodes, ranks_per_node(r))
    threads = r.cpus_per_task or 1
    q = shlex.quote
    lines = ["#!/bin/bash",
             f"# myriad training job, generated by python -m myriad.operations.sbatch from {r.config}.",
             "# Submit: sbatch THIS_FILE (create the --output folder first). Preempted or out of time, it",
             "# checkpoints and requeues itself; it never requeues a finished or failed run",
             "# (docs/planning.md, Slurm batch scripts)."]
    lines += sbatch_directives(r)
    lines += _layout_notes(facts, r)
    lines += ["set -uo pipefail", "",
              f"CONFIG={q(r.config)}"]
    if r.sweep:
        lines += [f"SWEEP_VALUES=({' '.join(q(v) for v in sweep_values)})  # {sweep_key}, one per array task",
                  "TASK=${SLURM_ARRAY_TASK_ID:-0}",
                  f"RUN_DIR={q(facts.logging_dir.rstrip('/'))}/sweep_$TASK  # this task's logging.dir",
                  'CHECKPOINT_DIR="$RUN_DIR/checkpoints"  # checkpoint.dir: the driver\'s checkpoints']
    else:
        lines.append(f"CHECKPOINT_DIR={q(facts.checkpoint_dir)}  # checkpoint.dir: the driver's checkpoints")
    lines += [f"TRAINING_STEPS={facts.steps}  # training.steps: finished once the newest checkpoint is there",
              f"export OMP_NUM_THREADS={threads}"]
    if r.launcher == "mpirun":
        lines.append('export PYTHONPATH="${PYTHONPATH:-}"')
    lines += [f"export {key}={q(str(value))}" for key, value in sorted(r.environment.items())]
    lines += list(r.setup)
    launch = launch_command(r, world)
    driver_at = launch.index("--config")
    launch[driver_at + 1] = '"$CONFIG"'
    shell_words = {'"$CONFIG"'}
    if r.sweep:
        task_sets = [f'"{sweep_key}=${{SWEEP_VALUES[$TASK]}}"', '"logging.dir=$RUN_DIR"',
                     '"checkpoint.dir=$CHECKPOINT_DIR"']
        shell_words.update(task_sets)
        for word in task_sets:
            launch += ["--set", word]
    words = [w if w in shell_words else q(w) for w in launch]
    lines += ["LAUNCH=(" + " ".join(words) + ")", ""]
    text = ("\n".join(lines) + "\n" + NEWEST_STEP_BASH + "\n" + JOB_PREEMPTED_BASH + "\n" + REQUEUE_DECISION_BASH + "\n"
            + LAUNCH_AND_DECIDE_BASH)
    return text


def build_parser():
    p = argparse.ArgumentParser(prog="python -m myriad.operations.sbatch",
                                description="Print a Slurm batch script that runs a myriad config on N nodes, "
                                            "checkpoints on preemption and requeues itself "
                                            "(docs/planning.md)")
    p.add_argument("--config", required=True, help="the run's YAML (the planner's plan)")
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--gpus-per-node", type=int, required=True,
                   help="GPUs per node = ranks per node; 0 = a CPU run (give --tasks-per-node)")
    p.add_argument("--tasks-per-node", type=int, help="ranks per node of a CPU run (--gpus-per-node 0)")
    p.add_argument("--job-name", default="myriad")
    p.add_argument("--time", dest="time_limit", default="24:00:00", help="time limit (Slurm format)")
    p.add_argument("--partition")
    p.add_argument("--account")
    p.add_argument("--qos")
    p.add_argument("--switches", type=int, help="at most this many leaf switches (topology hint)")
    p.add_argument("--switches-wait", help="longest wait for that switch count (Slurm time), e.g. 1:00:00")
    p.add_argument("--output-dir", default=".", help="folder of the job's log %%x-%%j.out (must exist)")
    p.add_argument("--workdir", help="the job's working directory (default: the submit directory)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="config override passed to the driver (repeatable)")
    p.add_argument("--launcher", choices=LAUNCHERS, default="srun",
                   help="srun --mpi=pmix (Slurm's own, default) or mpirun inside the allocation")
    p.add_argument("--signal-lead", dest="signal_lead_s", type=int, default=180,
                   help="seconds before the time limit at which the run checkpoints (default 180)")
    p.add_argument("--cpus-per-task", type=int)
    p.add_argument("--no-exclusive", dest="exclusive", action="store_false")
    p.add_argument("--restarts", type=int, default=0, help="in-allocation restarts of failures (myriad.run)")
    p.add_argument("--python", default="python3", help="the interpreter that has myriad (default python3)")
    p.add_argument("--sweep", metavar="KEY=V1,V2,...",
                   help="a job array: task i runs with KEY=Vi in <logging.dir>/sweep_<i>")
    p.add_argument("--setup", action="append", default=[], metavar="LINE",
                   help="shell line run before the launch, e.g. 'source venv/bin/activate' (repeatable)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment variable for every rank (repeatable)")
    p.add_argument("--out", help="write the script here instead of stdout")
    return p


def main(argv=None):
    """Command line; returns the exit code (2 and one line on stderr for a bad request)."""
    args = build_parser().parse_args(argv)
    environment = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            print(f"error: --env '{item}' is not NAME=VALUE", file=sys.stderr)
            return 2
        environment[name] = value
    fields = {f.name for f in dataclasses.fields(SbatchRequest)}
    values = {k: v for k, v in vars(args).items() if k in fields}
    request = SbatchRequest(**values, environment=environment)
    try:
        text = render_sbatch(request)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
