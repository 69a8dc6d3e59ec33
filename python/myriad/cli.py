"""The `myriad` command: the one entry point of myriad's tools.

    myriad train --config C [launch flags]             the training driver (mpirun -np N myriad train ...)
    myriad run [options] -- mpirun ... myriad train    supervised launch: restarts from the newest checkpoint
    myriad data <tokenize|dedup|mix|inspect> ...       the data pipeline (the C++ program myriad-data)
    myriad convert <export|import> ...                 checkpoints to and from safetensors (HF, int8)
    myriad plot RUN_DIR                                PNG charts of a run's metrics.jsonl
    myriad plan --config C --gpus N [--gpu h100 ...]   will it fit, how fast, which layout (+ --dry-run)
    myriad goodput [--gpus 1024,4096,...]              failures, checkpoint interval, Young/Daly
    myriad sbatch --config C --nodes N ...             a Slurm batch script that requeues on preemption
    myriad cluster-sim [--policies ...]                a shared cluster's scheduling policies compared
    myriad audit <verify|show> LOG ...                 check and read an audit log (docs/security.md)
    myriad keys <new|list|rotate> ...                  the key file of encryption at rest (docs/security.md)
    myriad serve --checkpoint DIR | --hf DIR [...]     an OpenAI-compatible completions server (docs/serving.md)

`myriad <command> ARGS` runs the command's module's main(ARGS): `myriad train --config X` is
`myriad-train --config X` is `python -m myriad.train --config X` is `python3 python/train.py
--config X` (the source tree's script, kept for `mpirun ... python train.py` launch lines).
`myriad data ARGS` runs the C++ program myriad-data with ARGS and returns its exit code; `myriad serve`
(myriad/serve.py) runs the C++ program myriad-serve. Each program is looked for, in order: its
environment variable ($MYRIAD_DATA_PROGRAM, $MYRIAD_SERVE_PROGRAM: a path, when set), next to the
interpreter (the environment's scripts folder, where `pip install .` puts it), on PATH, then at
build/tools/<program> of the source tree.

The older commands myriad-train, myriad-run, myriad-plot, myriad-convert and myriad-data remain
as aliases for one release; `myriad <command>` is the entry point.
"""
import os
import shutil
import sys
import sysconfig

# name -> (module whose main(argv) runs it, or None for the C++ myriad-data; one line of help)
COMMANDS = {
    "train": ("myriad.train", "the training driver: a config, launch flags, --set overrides (docs/launch.md)"),
    "run": ("myriad.run", "supervised launch: restarts a failed run from its newest checkpoint"),
    "data": (None, "tokenize, dedup, mix and inspect corpora (the C++ program myriad-data; docs/data.md)"),
    "convert": ("myriad.convert", "checkpoints to and from safetensors (Hugging Face, int8)"),
    "plot": ("myriad.plot", "PNG charts of a run's metrics.jsonl"),
    "plan": ("myriad.planner.plan", "per-rank memory and step time of a config's layouts; the best ones"),
    "goodput": ("myriad.operations.goodput", "effective training time under failures; the checkpoint interval"),
    "sbatch": ("myriad.operations.sbatch", "a Slurm batch script for a planned config"),
    "cluster-sim": ("myriad.operations.cluster_sim", "scheduling policies of a shared cluster, simulated"),
    "audit": ("myriad.audit_command", "verify an audit log's hash chain; show its records (docs/security.md)"),
    "keys": ("myriad.keys_command", "the key file of encryption at rest: new key, list, rotate (docs/security.md)"),
    "serve": ("myriad.serve", "an OpenAI-compatible completions server over a checkpoint (docs/serving.md)"),
}

DATA_PROGRAM = "myriad-data"
DATA_PROGRAM_ENV = "MYRIAD_DATA_PROGRAM"  # a path to the program: looked at first (tests, unusual installs)
SERVE_PROGRAM = "myriad-serve"
SERVE_PROGRAM_ENV = "MYRIAD_SERVE_PROGRAM"
# The source tree's builds of the C++ programs (python/myriad/cli.py -> <repo>/build/tools/<program>).
SOURCE_TREE_TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                 "build", "tools")
SOURCE_TREE_DATA_PROGRAM = os.path.join(SOURCE_TREE_TOOLS, DATA_PROGRAM)


def usage():
    lines = ["usage: myriad <command> [options]", "", "commands:"]
    lines += [f"  {name:<12} {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "`myriad <command> --help` lists a command's options. myriad-train, myriad-run, myriad-plot,",
              "myriad-convert and myriad-data remain as aliases of `myriad <command>` for one release."]
    return "\n".join(lines)


def _executable(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def find_data_program(environ=None, executable=None, scripts_dir=None, source_tree_program=None):
    """(path of myriad-data or None, the places looked at in order, as text): find_program's order."""
    return find_program(DATA_PROGRAM, DATA_PROGRAM_ENV, environ, executable, scripts_dir,
                        SOURCE_TREE_DATA_PROGRAM if source_tree_program is None else source_tree_program)


def find_program(name, env_var, environ=None, executable=None, scripts_dir=None, source_tree_program=None):
    """(path of the C++ program `name` or None, the places looked at in order, as text). The order:
    $`env_var` when set (nothing else is tried then), the folder of the interpreter and the
    environment's scripts folder, PATH, the source tree's build/tools/`name`."""
    environ = os.environ if environ is None else environ
    executable = sys.executable if executable is None else executable
    scripts_dir = sysconfig.get_path("scripts") if scripts_dir is None else scripts_dir
    source_tree_program = os.path.join(SOURCE_TREE_TOOLS, name) if source_tree_program is None else source_tree_program
    looked = []
    explicit = environ.get(env_var)
    if explicit:
        looked.append(f"${env_var}={explicit}")
        return (explicit if _executable(explicit) else None), looked
    folders = []
    for folder in (os.path.dirname(executable) if executable else "", scripts_dir or ""):
        if folder and os.path.abspath(folder) not in folders:
            folders.append(os.path.abspath(folder))
    for folder in folders:
        path = os.path.join(folder, name)
        looked.append(path)
        if _executable(path):
            return path, looked
    looked.append(f"PATH ({environ.get('PATH', '')})")
    on_path = shutil.which(name, path=environ.get("PATH", os.defpath))
    if on_path:
        return on_path, looked
    looked.append(source_tree_program)
    if _executable(source_tree_program):
        return source_tree_program, looked
    return None, looked


def run_data(argv):
    """myriad data ARGS: myriad-data ARGS; its exit code (128 + N when a signal N ended it)."""
    import subprocess

    program, looked = find_data_program()
    if program is None:
        print(f"error: myriad data: the program {DATA_PROGRAM} was not found; looked at:\n  " + "\n  ".join(looked)
              + f"\n(`pip install .` installs it next to the interpreter; a source-tree build makes "
              f"build/tools/{DATA_PROGRAM}; or set {DATA_PROGRAM_ENV} to its path)", file=sys.stderr)
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    process = subprocess.Popen([program, *argv])
    while True:
        try:
            code = process.wait()
            break
        except KeyboardInterrupt:  # the terminal sent SIGINT to myriad-data too: its exit code is the answer
            continue
    return code if code >= 0 else 128 - code


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command '{name}' (one of {', '.join(COMMANDS)}; myriad --help)", file=sys.stderr)
        return 2
    if name == "data":
        return run_data(rest)
    import importlib
    module = importlib.import_module(COMMANDS[name][0])
    saved = sys.argv
    sys.argv = [f"myriad {name}", *rest]  # the usage line of a parser without its own prog says `myriad NAME`
    try:
        result = module.main(rest)
    finally:
        sys.argv = saved
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
