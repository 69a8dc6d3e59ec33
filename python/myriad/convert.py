"""Move models in and out of myriad:

    python -m myriad.convert export CHECKPOINT_DIR OUT.safetensors    # + OUT.yaml (the run config)
    python -m myriad.convert import IN.safetensors CONFIG.yaml CHECKPOINT_ROOT
    python -m myriad.convert export --format hf CHECKPOINT_DIR HF_DIR
    python -m myriad.convert import --format hf HF_DIR CHECKPOINT_ROOT [--config-out F] [--data PATH]

export writes every parameter of a checkpoint as a full tensor under myriad's names; import builds
a step-0 checkpoint (fresh optimizer state) from such a file and a run config, to continue with
`myriad-train --config CONFIG.yaml --resume <printed path>`. With --format hf the folder is one
`transformers` loads (myriad/hf.py: GPT-2 and LLaMA); import writes the run config (model section,
the folder's tokenizer, --data as corpus) beside the checkpoint. Errors name the file and tensor.
"""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m myriad.convert", description="checkpoint <-> safetensors")
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="checkpoint directory -> .safetensors (+ .yaml config), or a Hugging "
                            "Face folder (--format hf)")
    export.add_argument("--format", choices=["myriad", "hf"], default="myriad")
    export.add_argument("checkpoint_dir")
    export.add_argument("output")
    imp = sub.add_parser("import", help=".safetensors + config -> step-0 checkpoint; --format hf: a Hugging Face "
                         "folder -> step-0 checkpoint + run config")
    imp.add_argument("--format", choices=["myriad", "hf"], default="myriad")
    imp.add_argument("--config-out", help="hf: where to write the run config (default CHECKPOINT_ROOT/imported.yaml)")
    imp.add_argument("--data", help="hf: the corpus the run config names (data.path)")
    imp.add_argument("paths", nargs="+", metavar="PATH",
                     help="myriad: IN.safetensors CONFIG.yaml CHECKPOINT_ROOT; hf: HF_DIR CHECKPOINT_ROOT")
    args = parser.parse_args(argv)
    if args.command == "import":
        wanted = 2 if args.format == "hf" else 3
        if len(args.paths) != wanted:
            parser.error(f"import --format {args.format} takes {wanted} paths "
                         f"({'HF_DIR CHECKPOINT_ROOT' if wanted == 2 else 'IN.safetensors CONFIG.yaml CHECKPOINT_ROOT'}), "
                         f"got {len(args.paths)}")
    import myriad
    from myriad import hf

    try:
        if args.command == "export" and args.format == "hf":
            for path in hf.export_hf(args.checkpoint_dir, args.output):
                print(path)
        elif args.command == "export":
            config = myriad.export_safetensors(args.checkpoint_dir, args.output)
            print(f"{args.output}\n{config}")
        elif args.format == "hf":
            checkpoint, config = hf.import_hf(args.paths[0], args.paths[1], args.config_out, args.data)
            print(f"{checkpoint}\n{config}")
        else:
            print(myriad.import_safetensors(*args.paths))
    except (myriad.Error, hf.HfError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
