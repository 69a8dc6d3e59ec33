"""Move models in and out of myriad:

    python -m myriad.convert export CHECKPOINT_DIR OUT.safetensors    # + OUT.yaml (the run config)
    python -m myriad.convert import IN.safetensors CONFIG.yaml CHECKPOINT_ROOT

export writes every parameter of a checkpoint as a full tensor under myriad's names; import builds
a step-0 checkpoint (fresh optimizer state) from such a file and a run config, to continue with
`python/train.py --config CONFIG.yaml --resume <printed path>`. Errors name the file and tensor.
"""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m myriad.convert", description="checkpoint <-> safetensors")
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="checkpoint directory -> .safetensors (+ .yaml config)")
    export.add_argument("checkpoint_dir")
    export.add_argument("output")
    imp = sub.add_parser("import", help=".safetensors + config -> step-0 checkpoint")
    imp.add_argument("input")
    imp.add_argument("config")
    imp.add_argument("checkpoint_root")
    args = parser.parse_args(argv)
    import myriad

    try:
        if args.command == "export":
            config = myriad.export_safetensors(args.checkpoint_dir, args.output)
            print(f"{args.output}\n{config}")
        else:
            print(myriad.import_safetensors(args.input, args.config, args.checkpoint_root))
    except myriad.Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
