"""myriad training driver, launched under mpirun (one process per rank).

    mpirun -np 2 python3 python/train.py --config configs/gpt2_tiny.yaml --log_dir runs/tiny [--set KEY=VALUE ...]
    mpirun -np 2 myriad-train --config configs/gpt2_tiny.yaml        (the installed package's command)
    mpirun -np 2 python3 -m myriad.train --config configs/gpt2_tiny.yaml

The three are one program: python/train.py (the source tree's script) and the `myriad-train`
console command both call main() here.

Thin by design: it starts MPI (when launched by mpirun with more than one rank), parses the
config, the launch flags (the cluster-training recipe's style: --batch_size=4M, --lr, --fp16, --resume,
--log_dir, ...; python/myriad/launch_flags.py, docs/launch.md) and the --set overrides (in that
order: file, flags, --set), builds the process groups and the C++ Engine and walks the steps,
printing on rank 0 one line per logging step —
`Iteration: 12/600 | Loss: 4.6210 | Comm: 5% | Samples/sec: 34.1 | Grad Norm: 0.612 | Tokens/sec: 8.7k
| MFU: 9.8% | 236 ms/step | Mem: 0.21 GiB | LR: 1.70e-03` (+ Bubble, Loss Scale when they apply) —
and every step whose loss or gradients were not finite (`Loss: nan | ... | skipped (loss scale 2^k)`),
the validation loss every training.eval_every steps, checkpoints every checkpoint.every steps and
at the end, and a text sample from the trained model. Everything heavy runs in C++; evaluation,
checkpoints and sampling are collective over the ranks.

Errors: a myriad.Error (bad config, unreadable data, a failure inside a step) prints
`error: <message>` on stderr — no traceback — and appends its source location and full message
to <logging.dir>/rank<R>.log; an error on any rank ends every rank of the job (MPI_Abort).
Exit codes: 0 done or preempted (checkpoint written); 2 deterministic — bad input (flags,
config, data, a checkpoint to resume from) or training.max_nonfinite_steps reached — rerunning
the same command fails the same way, so `python -m myriad.run` does not restart it; 3 (or 1, or
a signal) any other failure, which the supervisor restarts from the newest checkpoint.

A fresh run (no --resume) into a logging.dir that holds another run's metrics.jsonl, or into a
checkpoint.dir that holds its checkpoints, is refused (exit code 2) before anything is written; a
resumed run appends its steps to the folder's metrics.jsonl (after a failure, steps between the
checkpoint and the failure appear twice: the later record of a step is the resumed run's).

Preemption: SIGTERM or SIGUSR1 on any rank makes every rank stop at the next step boundary (the
ranks agree with one tiny all-reduce per step), write a checkpoint and exit 0; `--resume auto`
continues from it. `python -m myriad.run` restarts a failed job from its newest checkpoint.
The two signals are taken by one watcher thread (sigwait); every other thread of the process —
Open MPI's, the engine's, OpenMP's, the GEMM library's — has them blocked from its start, so no
compute or communication thread is ever interrupted by one (see block_stop_signals).
Testing aids (first attempt of a supervised run only, MYRIAD_ATTEMPT unset or 0):
MYRIAD_FAULT="kill:rank=R:step=S" makes rank R kill itself (SIGKILL) after step S;
MYRIAD_FAULT="kill_in_save:rank=R:step=S" does so once the background write of the checkpoint of
step S has started its data file (a crash in the middle of a save);
MYRIAD_FAULT="stall:rank=R:step=S:seconds=N" makes rank R sleep N seconds after step S (a hung
rank: the others' collective watchdog reports it and aborts the job).
"""
import argparse
import math
import os
import re
import signal
import sys
import threading
import time


# Exit codes (docs/launch.md): BAD_INPUT is deterministic and never restarted by myriad.run.
EXIT_BAD_INPUT = 2
EXIT_FAILED = 3


def load_launch_flags():
    """myriad.launch_flags — from its file when the extension is not built yet (so that --help and
    flag errors work without a build)."""
    try:
        from myriad import launch_flags
        return launch_flags
    except ImportError:
        import importlib.util
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch_flags.py")
        spec = importlib.util.spec_from_file_location("myriad_launch_flags", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


def parse_args(argv):
    """(args with .config, .overrides, .settings); raises launch_flags.LaunchFlagError with a
    one-line message on any flag the driver cannot take."""
    flags = load_launch_flags()
    driver_argv, settings = flags.translate(argv)

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise flags.LaunchFlagError(f"{message} (python3 python/train.py --help)")

    parser = Parser(description="myriad training driver (docs/launch.md)", epilog=flags.flag_table_text(),
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="YAML run configuration (docs/config.md)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set training.lr=3e-4 (repeatable; applied last)")
    args = parser.parse_args(driver_argv)
    args.settings = settings
    return args


def build_config(myriad, flags, args, loaded, world=1):
    """The run's Config: the file, then the launch flags in command-line order, then --set. A
    --batch_size in tokens is divided by the sequence length the run will use (after --set), and
    the --set overrides are applied again after it so that they still win. With --batch_size and
    --gradient_accumulation but no micro-batch given (DeepSpeed's rule), training.micro_batch is
    derived for the `world`'s dp. The config is appended to `loaded` as soon as the file is read
    (its logging.dir is known from then on)."""
    config = myriad.Config.from_file(args.config)
    loaded.append(config)
    deferred = []
    for setting in args.settings:
        if setting.tokens is None:
            config.set(setting.override())
        else:
            deferred.append(setting)
    for override in args.overrides:
        config.set(override)
    for setting in deferred:
        seq_len = config.resolved()["training.seq_len"]
        sequences = flags.batch_size_in_sequences(setting.tokens, seq_len, setting.flag.partition("=")[2])
        config.set(f"{setting.key}={sequences}")
        for override in args.overrides:
            config.set(override)
    derive_micro_batch(config, flags, args, world)
    return config


def derive_micro_batch(config, flags, args, world):
    """DeepSpeed's rule for its flags: given the global batch and the accumulation but no micro-batch
    (no --micro_batch, no --set training.micro_batch), micro_batch = global batch / (accumulation x dp),
    refused with the arithmetic when it does not divide."""
    given = {s.key for s in args.settings} | {o.partition("=")[0].strip() for o in args.overrides}
    if not {"training.global_batch_size", "training.gradient_accumulation"} <= given or "training.micro_batch" in given:
        return
    settled = config.for_world(world)
    dp, accumulation = settled["parallel.dp"], settled["training.gradient_accumulation"]
    batch = settled["training.global_batch_size"]
    if dp < 1 or accumulation < 1:
        return  # the layout or the accumulation is refused by validation, naming its key
    if batch % (accumulation * dp):
        raise flags.LaunchFlagError(
            f"--batch_size ({batch} sequences) is not a whole number of micro-batches: {batch} / "
            f"(--gradient_accumulation {accumulation} x dp {dp}) = {batch / (accumulation * dp):g}; "
            f"give --micro_batch, or a batch size that divides")
    config.set(f"training.micro_batch={batch // (accumulation * dp)}")


def error_location(e):
    """(file, line, message) of an error: a myriad.Error from C++ carries e.file / e.line /
    e.message; one raised here (or any other exception) has no source location (file None)."""
    message = getattr(e, "message", None) or re.sub(r"^\[rank \d+\] ", "", str(e))
    return getattr(e, "file", None) or None, getattr(e, "line", None), message


def report_error(e, rank, log_dir):
    """Prints `error: <str(e)>` on stderr and, when the run directory is known, appends the
    source location and the full message to <log_dir>/rank<R>.log (no traceback anywhere)."""
    print(f"error: {e}", file=sys.stderr, flush=True)
    if not log_dir:
        return
    file, line, message = error_location(e)
    where = f"{file}:{line}" if file else f"{type(e).__name__} (no source location)"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S") + f".{int(time.time() * 1000) % 1000:03d}"
    try:
        os.makedirs(log_dir, exist_ok=True)
        with open(os.path.join(log_dir, f"rank{rank}.log"), "a") as f:
            f.write(f"[{stamp}] [rank {rank}] [error] {where}: {message}\n")
    except OSError:
        pass  # the console already has the message


def log_dir_from_args(args):
    """logging.dir as far as the command line tells it (used when the config could not be read)."""
    found = None
    for setting in getattr(args, "settings", []):
        if setting.key == "logging.dir":
            found = setting.value
    for override in getattr(args, "overrides", []):
        key, _, value = override.partition("=")
        if key.strip() == "logging.dir":
            found = value.strip()
    return found


# What a run leaves in its logging.dir that a fresh run would mix with its own: metrics.jsonl
# (appended to, steps restarting at 1) and config.yaml (overwritten).
RUN_RECORDS = ("metrics.jsonl", "config.yaml")


def log_folder_conflict(log_dir):
    """'' when a run from step 0 may write into `log_dir`; otherwise why not: another run's
    metrics.jsonl is there (non-empty: that run trained steps), with the way out. A config.yaml
    without metrics (a run that stopped before its first step) is no conflict."""
    metrics = os.path.join(log_dir, "metrics.jsonl")
    try:
        if os.path.getsize(metrics) == 0:
            return ""
    except OSError:
        return ""
    found = [name for name in RUN_RECORDS if os.path.exists(os.path.join(log_dir, name))]
    return (f"the logging folder {log_dir} already holds another run's {' and '.join(found)}; a fresh run would "
            f"append its steps (from 1) to those metrics and overwrite its config.yaml. Continue that run with "
            f"--resume auto (checkpoint.resume=auto), or start this one in a new folder (logging.dir)")


def launcher_rank_and_size():
    for rank_var, size_var in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                               ("SLURM_PROCID", "SLURM_NTASKS")):
        if rank_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ.get(size_var, "1"))
    return 0, 1


def human(n):
    """3 significant digits with a k/M/G/T suffix: 152k, 15.2k, 1.52k, 152, 8.70."""
    for unit in ("", "k", "M", "G", "T"):
        digits = 2 if abs(n) < 10 else 1 if abs(n) < 100 else 0
        text = f"{n:.{digits}f}"
        if abs(float(text)) < 1000 or unit == "T":
            return text + unit
        n /= 1000.0


def number(value, spec):
    """A metric that may be None (NaN or inf in metrics.jsonl) formatted with `spec`, or 'nan'."""
    if value is None or not math.isfinite(value):
        return "nan"
    return format(value, spec)


def scale_text(scale):
    """A loss scale as 2^k when it is a power of two, else 3 significant digits."""
    if scale is None or not math.isfinite(scale) or scale <= 0:
        return "nan"
    exponent = math.log2(scale)
    return f"2^{int(exponent)}" if exponent == int(exponent) else f"{scale:.3g}"


class Window:
    """Sums of the steps since the previous printed step line (its rates are window averages)."""

    def __init__(self):
        self.tokens = self.samples = self.steps = 0
        self.seconds = self.comm = self.bubble = self.flops = 0.0

    def add(self, m):
        self.tokens += m.get("tokens") or 0
        self.samples += m.get("samples") or 0
        self.steps += 1
        self.seconds += m.get("step_seconds") or 0.0
        self.comm += m.get("comm_seconds") or 0.0
        self.bubble += m.get("bubble_seconds") or 0.0
        self.flops += m.get("model_flops") or 0.0


def not_finite(m):
    return bool(m.get("skipped")) or m.get("loss") is None or m.get("grad_norm") is None


def step_line(m, steps, window, world, peak, device):
    """The console line of one step: the cluster-training recipe's monitoring fields in its order (Iteration,
    Loss, GPU Util, Comm, Memory BW, Pcie BW, Samples/sec, Grad Norm; the three GPU fields on cuda when
    NVML reads the device), then Tokens/sec, MFU, ms/step, memory and the learning rate; Bubble
    and Loss Scale when they apply; `skipped (...)` for a step whose update was skipped. Every
    field that can be None (not finite) is printed as nan."""
    seconds = max(window.seconds, 1e-9)
    memory = m.get("memory") or {}
    if device == "cuda":
        gpu = sum(memory.get(k) or 0 for k in ("parameters", "gradients", "optimizer", "activations", "workspace"))
        mem = f"Mem: {gpu / 2**30:.2f} GiB GPU"
    else:
        mem = f"Mem: {(memory.get('rss_current') or 0) / 2**30:.2f} GiB"
    mfu = 100 * window.flops / seconds / (world * peak) if peak else 0.0
    gpu = m.get("gpu") or {}  # training.device cuda with NVML: the step's mean readings

    def share(key):
        return f"{100 * gpu[key]:.0f}%" if gpu.get(key) is not None else "n/a"

    parts = [f"Iteration: {m['step']}/{steps}", f"Loss: {number(m.get('loss'), '.4f')}"]
    if gpu:
        parts.append(f"GPU Util: {share('utilization')}")
    parts.append(f"Comm: {100 * window.comm / seconds:.0f}%")
    if gpu:
        parts += [f"Memory BW: {share('memory_bw')}", f"Pcie BW: {share('pcie_bw')}"]
    parts += [f"Samples/sec: {human(window.samples / seconds)}", f"Grad Norm: {number(m.get('grad_norm'), '.3f')}",
              f"Tokens/sec: {human(window.tokens / seconds)}", f"MFU: {mfu:.1f}%",
              f"{1000 * window.seconds / max(1, window.steps):.0f} ms/step", mem, f"LR: {number(m.get('lr'), '.2e')}"]
    if window.bubble > 0:
        parts.append(f"Bubble: {100 * window.bubble / seconds:.0f}%")
    moe = m.get("moe")
    if moe:  # over the MoE layers: mean aux loss, dropped share, the busiest expert over the mean
        aux = sum(layer["aux_loss"] for layer in moe) / len(moe)
        dropped = sum(layer["dropped_share"] for layer in moe) / len(moe)
        load = max(layer["tokens_per_expert"]["max"] / max(layer["tokens_per_expert"]["mean"], 1e-9) for layer in moe)
        parts.append(f"MoE: aux {aux:.3f} drop {100 * dropped:.1f}% load max/mean {load:.2f}")
    attention = m.get("attention")
    if attention:  # block-sparse: kept blocks per query block, their share of dense causal attention
        text = f"Attn: {attention['kept_blocks_per_query_block']:.1f} blocks ({100 * attention['density']:.1f}%)"
        if "estimated_mass" in attention:
            text += f" est. mass {attention['estimated_mass']:.2f}"
        parts.append(text)
    scale = m.get("loss_scale")
    if m.get("skipped"):
        parts.append(f"skipped (loss scale {scale_text(scale)})" if scale != 1.0 else "skipped (non-finite gradients)")
    elif scale != 1.0:
        parts.append(f"Loss Scale: {scale_text(scale)}")
    return " | ".join(parts)


class Progress:
    """A one-line progress bar on a terminal (redrawn in place); silent when output is a file."""

    def __init__(self, total, enabled):
        self.total, self.enabled, self.start = total, enabled and sys.stderr.isatty(), time.time()

    def update(self, done, text=""):
        if not self.enabled:
            return
        width = 30
        filled = int(width * done / max(self.total, 1))
        elapsed = time.time() - self.start
        eta = elapsed / max(done, 1) * (self.total - done)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} {text} eta {eta:.0f}s ")
        sys.stderr.flush()

    def clear(self):
        if self.enabled:
            sys.stderr.write("\r" + " " * 100 + "\r")


STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


def block_stop_signals():
    """Blocks SIGTERM / SIGUSR1 in the calling thread — main(), before MPI or the engine start a
    thread — so every thread started later inherits the block and install_stop_signals' watcher is
    the one that takes them. Measured 2026-12-06 (docs/performance.md, "The CPU GEMM"): with the
    signals delivered to the working main thread, 11 of 42 two-rank runs with oneDNN's GEMM aborted
    in glibc's heap checks right after a SIGTERM; with them confined to a waiting thread, 0 of 42."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def install_stop_signals():
    """SIGTERM / SIGUSR1 set a flag checked at the next step boundary; returns the flag holder.
    A daemon thread waits for them (sigwait: they are blocked everywhere, block_stop_signals); the
    handler stays installed for a thread a library started before the block, so that a signal
    delivered there is noticed too instead of ending the process."""
    received = []

    def handler(signum, _frame):
        received.append(signal.Signals(signum).name)

    def watch():
        while True:
            received.append(signal.Signals(signal.sigwait(set(STOP_SIGNALS))).name)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    threading.Thread(target=watch, name="myriad-stop-signals", daemon=True).start()
    return received


def injected_fault(rank):
    """(kind, step) of the fault this rank injects (MYRIAD_FAULT, first attempt only), else None."""
    spec = os.environ.get("MYRIAD_FAULT", "")
    if not spec or os.environ.get("MYRIAD_ATTEMPT", "0") != "0":
        return None
    kind, *parts = spec.split(":")
    fields = dict(part.split("=", 1) for part in parts)
    if kind not in ("kill", "kill_in_save", "stall") or int(fields.get("rank", -1)) != rank:
        return None
    if kind == "stall":
        return kind, int(fields["step"]), float(fields.get("seconds", 60))
    return kind, int(fields["step"])


def die(rank, why):
    print(f"[rank {rank}] MYRIAD_FAULT: killing this rank {why}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def run(args, rank, world, runtime):
    import myriad
    from myriad import audit

    flags = load_launch_flags()
    stop_signals = install_stop_signals()
    fault = injected_fault(rank)

    loaded = []
    try:
        config = build_config(myriad, flags, args, loaded, world)
        log_dir = config["logging.dir"]
        config.validate(world)
        resolved_yaml = config.resolved().to_yaml()
        # Everything the run writes from here on is its owner's alone unless security.umask says otherwise.
        os.umask(int(config["security.umask"], 8))
        if not config["checkpoint.resume"]:
            # A fresh run must not mix its checkpoints, metrics and config.yaml with another run's.
            conflict = myriad.fresh_run_conflict(config.resolved()["checkpoint.dir"]) or log_folder_conflict(log_dir)
            if conflict:
                raise myriad.Error(f"[rank {rank}] {conflict}")
        try:
            os.makedirs(log_dir, exist_ok=True)
        except OSError as e:
            raise myriad.Error(f"[rank {rank}] logging.dir '{log_dir}' cannot be created: "
                               f"{e.strerror} ({e.filename})") from None
        if rank == 0:
            with open(os.path.join(log_dir, "config.yaml"), "w") as f:
                f.write(resolved_yaml)
        groups = myriad.ProcessGroups(config, runtime)
        engine = myriad.Engine(config, rank, os.path.join(log_dir, f"rank{rank}.log"), groups)
        if config["checkpoint.resume"]:
            engine.load(config["checkpoint.resume"])
        trail = audit.start_training(config, rank, world, log_dir, resolved_yaml, engine.step_count)
    except (myriad.Error, flags.LaunchFlagError, audit.AuditError) as e:
        # The run directory as far as it is known: the command line's, else the config file's.
        report_error(e, rank, log_dir_from_args(args) or (loaded[0]["logging.dir"] if loaded else None))
        return EXIT_BAD_INPUT
    try:
        return train(engine, groups, config, rank, world, stop_signals, fault, trail)
    except (myriad.Error, audit.AuditError) as e:
        trail.training_failed(e, engine.step_count)
        if runtime is None:
            # One process: end the engine first so that its log file is flushed and the error
            # line lands after its last lines. (Under MPI the abort follows; no collective
            # teardown is risked while another rank may be stuck.)
            e.__traceback__ = None
            del engine, groups
        report_error(e, rank, log_dir)
        # Reaching training.max_nonfinite_steps repeats exactly on a restart (same data, same
        # state): deterministic, like bad input.
        return EXIT_BAD_INPUT if "max_nonfinite_steps" in str(e) else EXIT_FAILED


def train(engine, groups, config, rank, world, stop_signals, fault, trail):
    steps, every, device = config["training.steps"], config["logging.every"], config["training.device"]
    eval_every, checkpoint_every = config["training.eval_every"], config["checkpoint.every"]
    mem = engine.memory_report()
    if rank == 0:
        print(f"[rank 0] training {steps} steps on {world} rank(s), {engine.tokens_per_step} tokens/step; memory per "
              f"rank: params {mem['parameters'] / 2**20:.1f} MiB, grads {mem['gradients'] / 2**20:.1f} MiB, "
              f"optimizer {mem['optimizer'] / 2**20:.1f} MiB, activations {mem['activations'] / 2**20:.1f} MiB",
              flush=True)
    progress = Progress(steps, rank == 0)
    peak = engine.peak_flops["mfu_peak"]
    window = Window()
    while engine.step_count < steps:
        m = engine.step()
        window.add(m)
        step = m["step"]
        if rank == 0 and (step % every == 0 or step == steps or step == 1 or not_finite(m)):
            progress.clear()
            print(step_line(m, steps, window, world, peak, device), flush=True)
            window = Window()
        for s in m["stragglers"]:
            if rank == 0:
                print(f"Iteration: {step}/{steps} | straggler: rank {s['rank']} ({s['coords']}) on {s['host']}: "
                      f"compute {1000 * s['compute_seconds']:.1f} ms/step "
                      f"vs median {1000 * s['median_seconds']:.1f} ms",
                      flush=True)
        if eval_every and step % eval_every == 0:
            val = engine.evaluate()
            if rank == 0:
                progress.clear()
                print(f"Iteration: {step}/{steps} | Val Loss: {number(val, '.4f')}", flush=True)
        if checkpoint_every and step % checkpoint_every == 0 and step < steps:
            trail.checkpoint_saved(engine.save(background=config["checkpoint.async"]), step)
            if fault == ("kill_in_save", step):
                # Wait until the writer has started (its temporary directory exists), so that the
                # kill lands in the middle of the write rather than before it.
                partial = os.path.join(config.resolved()["checkpoint.dir"], f".tmp-step_{step:08d}", f"rank_{rank}.bin")
                deadline = time.time() + 10
                while not os.path.exists(partial) and time.time() < deadline:
                    time.sleep(0.0005)
                die(rank, f"while the checkpoint of step {step} is being written")
        if fault == ("kill", step):
            die(rank, f"after step {step}")
        if fault is not None and fault[:2] == ("stall", step):
            print(f"[rank {rank}] MYRIAD_FAULT: stalling this rank for {fault[2]:.0f} s after step {step}",
                  file=sys.stderr, flush=True)
            time.sleep(fault[2])
        if groups.any(bool(stop_signals)) and step < steps:
            path = engine.save()
            if rank == 0:
                progress.clear()
                cause = stop_signals[0] if stop_signals else "a signal on another rank"
                print(f"preempted by {cause} at step {step}: checkpoint {path}; continue with --resume auto",
                      flush=True)
                trail.training_stopped(path, step, cause)
            del engine, groups
            return 0
        progress.update(step, f"loss {number(m.get('loss'), '.3f')}")
    progress.clear()
    val = engine.evaluate()
    if rank == 0:
        print(f"Final | Val Loss: {number(val, '.4f')}", flush=True)
    path = engine.save()
    if rank == 0:
        print(f"[rank 0] checkpoint: {path}", flush=True)
        trail.training_finished(path, engine.step_count, val)
    sample = config.to_dict()["sample"]
    if sample["tokens"] > 0:
        text = engine.generate(sample["prompt"], sample["tokens"], sample["temperature"], sample["top_k"],
                               config["training.seed"])
        if rank == 0:
            print("---- sample ----")
            print(text)
            print("----------------", flush=True)
    del engine, groups
    return 0


def main(argv=None):
    """The driver's command line (sys.argv[1:] by default); returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    block_stop_signals()  # before any thread exists (install_stop_signals takes them)
    rank, world = launcher_rank_and_size()
    try:
        args = parse_args(argv)
    except Exception as e:  # noqa: BLE001 — launch_flags.LaunchFlagError (its class is loaded in parse_args)
        if type(e).__name__ != "LaunchFlagError":
            raise
        if rank == 0:  # every rank parses the same command line: one message, not one per rank
            print(f"error: {e}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    import myriad  # noqa: E402  (after argument parsing so --help works without a build)

    # MPI first: from here on, a failure on any rank can end all of them.
    runtime = myriad.MpiRuntime() if world > 1 else None
    try:
        code = run(args, rank, world, runtime)
    except BaseException as e:  # noqa: BLE001 — any failure on one rank must not leave the others waiting
        if runtime is None:
            raise
        myriad.MpiRuntime.abort(EXIT_FAILED, f"{type(e).__name__}: {e}")
    if code != 0 and runtime is not None:
        myriad.MpiRuntime.abort(code, "this rank failed (message above); ending the job")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
