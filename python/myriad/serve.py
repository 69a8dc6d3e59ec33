"""`myriad serve`: an OpenAI-compatible completions server over a trained model (docs/serving.md).

    myriad serve --checkpoint DIR [myriad-serve flags]     a checkpoint (or a run's checkpoint folder)
    myriad serve --hf HF_DIR [myriad-serve flags]          a Hugging Face GPT-2 / LLaMA folder
    myriad serve keys add|list|revoke FILE ...             the API keys of --auth FILE (serve_keys.py)

The server is the C++ program myriad-serve (found as `myriad data` finds myriad-data: cli.py). With
--checkpoint every argument goes to it unchanged and this process becomes it (exec), so signals —
SIGTERM drains — reach the server itself. With --hf the folder is first imported into a step-0
checkpoint (myriad/hf.py, with its tokenizer) under --work-dir (default: HF_DIR/.myriad-serve,
reused when it is already there), then served the same way. Under mpirun with several ranks
(tensor-parallel serving) the import must already be there: the ranks would race to write it.
"""
import os
import sys

from .cli import SERVE_PROGRAM, SERVE_PROGRAM_ENV, find_program


def _value(argv, flag):
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1], argv[:i] + argv[i + 2:]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:], argv[:i] + argv[i + 1:]
    return None, argv


def _launched_ranks():
    """The number of ranks an MPI launcher started (1 without one)."""
    for variable in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"):
        if os.environ.get(variable, "").isdigit():
            return int(os.environ[variable])
    return 1


def _import_hf(hf_dir, work_dir):
    """The checkpoint to serve for a Hugging Face folder: imported once into work_dir."""
    from . import hf

    done = os.path.join(work_dir, "checkpoint.txt")
    if os.path.exists(done):
        with open(done, encoding="utf-8") as f:
            checkpoint = f.read().strip()
        if os.path.exists(os.path.join(checkpoint, "manifest.json")):
            return checkpoint
    if _launched_ranks() > 1:
        raise ValueError(f"not imported yet under {work_dir}, and {_launched_ranks()} ranks would race to import it: "
                         f"run `myriad serve --hf {hf_dir}` once without mpirun (it imports, then serves; stop it), "
                         "then start the ranks")
    os.makedirs(work_dir, exist_ok=True)
    checkpoint, _ = hf.import_hf(hf_dir, os.path.join(work_dir, "checkpoints"),
                                 config_out=os.path.join(work_dir, "imported.yaml"))
    with open(done, "w", encoding="utf-8") as f:
        f.write(checkpoint + "\n")
    return checkpoint


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "keys":
        from . import serve_keys

        return serve_keys.main(argv[1:])
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        argv = ["--help"]
    hf_dir, argv = _value(argv, "--hf")
    work_dir, argv = _value(argv, "--work-dir")
    if hf_dir is not None:
        if any(a == "--checkpoint" or a.startswith("--checkpoint=") for a in argv):
            print("error: myriad serve: give --hf or --checkpoint, not both", file=sys.stderr)
            return 2
        try:
            checkpoint = _import_hf(hf_dir, work_dir or os.path.join(hf_dir, ".myriad-serve"))
        except (OSError, ValueError) as e:
            print(f"error: myriad serve --hf {hf_dir}: {e}", file=sys.stderr)
            return 2
        argv = ["--checkpoint", checkpoint, *argv]
    program, looked = find_program(SERVE_PROGRAM, SERVE_PROGRAM_ENV)
    if program is None:
        print(f"error: myriad serve: the program {SERVE_PROGRAM} was not found; looked at:\n  " + "\n  ".join(looked)
              + f"\n(`pip install .` installs it next to the interpreter; a source-tree build makes "
              f"build/tools/{SERVE_PROGRAM}; or set {SERVE_PROGRAM_ENV} to its path)", file=sys.stderr)
        return 127
    if argv == ["--help"]:
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(program, [program, *argv])


if __name__ == "__main__":
    sys.exit(main())
