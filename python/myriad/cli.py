"""The `myriad` command: one entry point for the planning tools (docs/planning.md).

    myriad plan --config C --gpus N [--gpu h100 ...]   will it fit, how fast, which layout (+ --dry-run)
    myriad goodput [--gpus 1024,4096,...]              failures, checkpoint interval, Young/Daly
    myriad sbatch --config C --nodes N ...             a Slurm batch script that requeues on preemption
    myriad cluster-sim [--policies ...]                a shared cluster's scheduling policies compared

Training, supervision, plots and conversion keep their own commands (myriad-train, myriad-run,
myriad-plot, myriad-convert, myriad-data). Each subcommand's module has its own main(argv).
"""
import sys

COMMANDS = {
    "plan": ("myriad.planner.plan", "per-rank memory and step time of a config's layouts; the best ones"),
    "goodput": ("myriad.planner.goodput", "effective training time under failures; the checkpoint interval"),
    "sbatch": ("myriad.planner.sbatch", "a Slurm batch script for a planned config"),
    "cluster-sim": ("myriad.planner.cluster_sim", "scheduling policies of a shared cluster, simulated"),
}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: myriad <command> [options]\n\ncommands:")
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:<12} {text}")
        print("\n`myriad <command> --help` lists a command's options.")
        return 0 if argv else 2
    name = argv[0]
    if name not in COMMANDS:
        print(f"error: unknown command '{name}' (one of {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    import importlib
    module = importlib.import_module(COMMANDS[name][0])
    result = module.main(argv[1:])
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
