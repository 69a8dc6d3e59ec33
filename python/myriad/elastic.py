"""Elastic restarts: the world a supervised job restarts on after hosts are lost (docs/cluster.md,
"Elastic restarts"); used by `python -m myriad.run --hostfile FILE`.

The hostfile is the truth about which hosts the job may use, kept by whoever watches the
hosts (an administrator, a health check, a test): lines `HOST slots=N`, and `HOST slots=N spare`
for hosts kept in reserve. Before every attempt the supervisor reads it again:

- **Hosts**: the non-spare hosts, then spares in file order while the world is below the
  first attempt's (a spare replaces a lost host; spares never grow the job beyond its start).
- **Layout**: the model-parallel degrees (tp, pp, cp) stay; the data-parallel degree is the
  largest dp the ranks allow that keeps the **global batch** (micro_batch x
  gradient_accumulation x dp of the first attempt) exactly: for that dp, the micro-batch is the
  largest divisor of the per-replica batch not above the first attempt's micro-batch, and
  gradient accumulation makes up the rest. Ranks beyond tp x pp x cp x dp stay idle (reported).
  No dp keeps the global batch (or the engine refuses every candidate layout, e.g. parallel.ep
  must divide dp): the plan says why and the supervisor stops.
- **Launch**: the mpirun command gets `-np` = the new world and `--hostfile` = a file written
  for the attempt (one line per slot, so several logical hosts on one machine work); the driver
  gets `--set parallel.dp=... --set training.micro_batch=... --set training.gradient_accumulation=...`.
  The checkpoint reshards on load (checkpoints are layout-independent), and the data order is a
  function of (seed, step, sample index), so the loss curve continues.
"""
import dataclasses
import os
import re
from typing import List, Optional, Sequence


@dataclasses.dataclass(frozen=True)
class Host:
    name: str
    slots: int
    spare: bool = False


def read_hostfile(path):
    """The hosts of `path` in order; ValueError naming the file and line for anything else."""
    hosts = []
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            match = re.fullmatch(r"(\S+)(?:\s+slots=(\d+))?(\s+spare)?", line)
            if not match or (match.group(2) is not None and int(match.group(2)) < 1):
                raise ValueError(f"{path}:{number}: '{raw.strip()}' is not 'HOST [slots=N] [spare]' (N >= 1)")
            hosts.append(Host(match.group(1), int(match.group(2) or 1), bool(match.group(3))))
    if not any(not h.spare for h in hosts):
        raise ValueError(f"{path}: no host left to run on (only spares, or empty)")
    return hosts


@dataclasses.dataclass(frozen=True)
class LayoutFacts:
    """What the plan keeps: the model-parallel product and the global batch of the first attempt."""
    model_parallel: int  # tp x pp x cp
    micro_batch: int
    global_batch: int  # sequences per optimizer step: micro_batch x gradient_accumulation x dp


@dataclasses.dataclass(frozen=True)
class WorldPlan:
    hosts: List[Host]
    world: int  # ranks launched: model_parallel x dp
    idle: int  # slots of the chosen hosts left unused
    dp: int
    micro_batch: int
    gradient_accumulation: int

    def overrides(self):
        return [f"parallel.dp={self.dp}", f"training.micro_batch={self.micro_batch}",
                f"training.gradient_accumulation={self.gradient_accumulation}"]


def choose_hosts(hosts, first_world):
    """The non-spare hosts, then spares while the slots are below `first_world` (None: no limit)."""
    chosen = [h for h in hosts if not h.spare]
    slots = sum(h.slots for h in chosen)
    for spare in (h for h in hosts if h.spare):
        if first_world is None or slots >= first_world:
            break
        chosen.append(spare)
        slots += spare.slots
    return chosen


def plan_world(hosts, facts, first_world=None, accept=lambda dp, micro, accum: None):
    """The WorldPlan on `hosts` that keeps `facts`' global batch with the most ranks, or a
    ValueError saying why there is none. `accept(dp, micro, accum)` returns None when the engine
    takes that layout, else its reason (the next smaller dp is then tried)."""
    chosen = choose_hosts(hosts, first_world)
    slots = sum(h.slots for h in chosen)
    most = slots // facts.model_parallel
    if most < 1:
        raise ValueError(f"{slots} slot(s) on {', '.join(h.name for h in chosen)} cannot hold one model replica "
                         f"(tp x pp x cp = {facts.model_parallel} ranks)")
    refused = []
    for dp in range(most, 0, -1):
        if facts.global_batch % dp:
            continue
        per_replica = facts.global_batch // dp
        micro = max(m for m in range(1, min(facts.micro_batch, per_replica) + 1) if per_replica % m == 0)
        accum = per_replica // micro
        reason = accept(dp, micro, accum)
        if reason:
            refused.append(f"dp {dp}: {reason}")
            continue
        world = dp * facts.model_parallel
        return WorldPlan(chosen, world, slots - world, dp, micro, accum)
    why = "; ".join(refused) if refused else f"no dp <= {most} divides the global batch {facts.global_batch}"
    raise ValueError(f"no layout on {slots} slot(s) keeps the global batch of {facts.global_batch} sequences: {why}")


def write_mpirun_hostfile(plan, path):
    """One line per slot (Open MPI counts a host listed N times as N slots), the plan's world only."""
    lines = []
    for host in plan.hosts:
        lines += [host.name] * host.slots
    with open(path, "w") as f:
        f.write("\n".join(lines[:plan.world]) + "\n")
    return path


HOSTFILE_FLAGS = ("--hostfile", "-hostfile", "--machinefile", "-machinefile")
NP_FLAGS = ("-np", "--np", "-n", "-c")


def relaunch(command, plan, hostfile):
    """The mpirun command with -np and --hostfile for `plan` and the plan's --set overrides added
    to the driver (the command's end); ValueError when it is not mpirun."""
    if not command or os.path.basename(command[0]) not in ("mpirun", "mpiexec", "orterun"):
        raise ValueError(f"--hostfile needs an mpirun command to relaunch, got '{command[0] if command else ''}'")
    out: List[str] = [command[0]]
    i, has_np, has_hostfile = 1, False, False
    while i < len(command):
        word = command[i]
        if word in NP_FLAGS and i + 1 < len(command):
            out += [word, str(plan.world)]
            has_np, i = True, i + 2
            continue
        if word in HOSTFILE_FLAGS and i + 1 < len(command):
            out += [word, hostfile]
            has_hostfile, i = True, i + 2
            continue
        if word.startswith(("--host=", "-H")) or word in ("--host", "-host"):
            raise ValueError("--hostfile replaces mpirun's host list: drop mpirun's --host/-H")
        out.append(word)
        i += 1
    inserted = ([] if has_np else ["-np", str(plan.world)]) + ([] if has_hostfile else ["--hostfile", hostfile])
    out[1:1] = inserted
    sets: Sequence[str] = [w for o in plan.overrides() for w in ("--set", o)]
    return out + list(sets)


def driver_config(command) -> Optional[tuple]:
    """(config path, [--set overrides]) of the training driver in `command`, or None."""
    config, overrides = None, []
    for i, word in enumerate(command):
        if word == "--config" and i + 1 < len(command):
            config = command[i + 1]
        elif word.startswith("--config="):
            config = word.split("=", 1)[1]
        elif word == "--set" and i + 1 < len(command):
            overrides.append(command[i + 1])
    return (config, overrides) if config else None


def describe_change(before, after):
    """One line: what the restart changed (hosts, world, dp, micro-batch, accumulation)."""
    if before is None:
        return (f"hosts {', '.join(f'{h.name}:{h.slots}' for h in after.hosts)}; world {after.world}, dp {after.dp}, "
                f"micro_batch {after.micro_batch}, gradient_accumulation {after.gradient_accumulation}")
    lost = [h.name for h in before.hosts if h not in after.hosts]
    added = [h.name for h in after.hosts if h not in before.hosts]
    parts = []
    if lost:
        parts.append(f"lost {', '.join(lost)}")
    if added:
        parts.append(f"added {', '.join(added)}")
    parts.append(f"world {before.world} -> {after.world}")
    parts.append(f"dp {before.dp} -> {after.dp}")
    parts.append(f"micro_batch {before.micro_batch} -> {after.micro_batch}")
    parts.append(f"gradient_accumulation {before.gradient_accumulation} -> {after.gradient_accumulation}")
    if after.idle:
        parts.append(f"{after.idle} slot(s) idle")
    return "; ".join(parts)
