"""Move models in and out of myriad:

    python -m myriad.convert export CHECKPOINT_DIR OUT.safetensors    # + OUT.yaml (the run config)
    python -m myriad.convert import IN.safetensors CONFIG.yaml CHECKPOINT_ROOT
    python -m myriad.convert export --format hf CHECKPOINT_DIR HF_DIR
    python -m myriad.convert export --format int8 [--group-size G] [--evaluate] CHECKPOINT_DIR OUT.safetensors
    python -m myriad.convert import --format hf HF_DIR CHECKPOINT_ROOT [--config-out F] [--data PATH]
                                                [--tokenizer SPEC]

export writes every parameter of a checkpoint as a full tensor under myriad's names; import builds
a step-0 checkpoint (fresh optimizer state) from such a file and a run config, to continue with
`myriad-train --config CONFIG.yaml --resume <printed path>`. With --format hf the folder is one
`transformers` loads (myriad/hf.py: GPT-2 and LLaMA); import writes the run config (model section,
the folder's tokenizer — GPT-2 files, or a byte-level BPE tokenizer.json converted beside the
checkpoint; any other tokenizer, or none, is refused unless --tokenizer names one — and --data as
corpus) beside the checkpoint. --format int8 writes the
weight-only INT8 file Engine.load_int8 serves (myriad/int8.py), prints its size against fp32 and
bf16 (the percentage smaller than bf16), what stayed f32 and why and, with --evaluate, the
validation loss of both. Errors name the file and tensor.
"""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m myriad.convert", description="checkpoint <-> safetensors")
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="checkpoint directory -> .safetensors (+ .yaml config), or a Hugging "
                            "Face folder (--format hf)")
    export.add_argument("--format", choices=["myriad", "hf", "int8"], default="myriad")
    export.add_argument("--group-size", type=int, default=0,
                        help="int8: input columns per scale (0 = one scale per output channel)")
    export.add_argument("--evaluate", action="store_true",
                        help="int8: also print the validation loss of the checkpoint and of the INT8 file")
    export.add_argument("checkpoint_dir")
    export.add_argument("output")
    imp = sub.add_parser("import", help=".safetensors + config -> step-0 checkpoint; --format hf: a Hugging Face "
                         "folder -> step-0 checkpoint + run config")
    imp.add_argument("--format", choices=["myriad", "hf"], default="myriad")
    imp.add_argument("--config-out", help="hf: where to write the run config (default CHECKPOINT_ROOT/imported.yaml)")
    imp.add_argument("--data", help="hf: the corpus the run config names (data.path)")
    imp.add_argument("--tokenizer", metavar="SPEC",
                     help="hf: data.tokenizer for the run config (gpt2:<dir>, bpe:<file>, train:<V>) instead of "
                     "the folder's; needed when the folder has no tokenizer myriad can read")
    imp.add_argument("paths", nargs="+", metavar="PATH",
                     help="myriad: IN.safetensors CONFIG.yaml CHECKPOINT_ROOT; hf: HF_DIR CHECKPOINT_ROOT")
    args = parser.parse_args(argv)
    if args.command == "import":
        wanted = 2 if args.format == "hf" else 3
        if len(args.paths) != wanted:
            layout = "HF_DIR CHECKPOINT_ROOT" if wanted == 2 else "IN.safetensors CONFIG.yaml CHECKPOINT_ROOT"
            parser.error(f"import --format {args.format} takes {wanted} paths ({layout}), got {len(args.paths)}")
    import myriad
    from myriad import audit, hf, int8

    target = None
    try:
        if args.command == "export" and args.format == "int8":
            report = int8.export_int8(args.checkpoint_dir, args.output, args.group_size)
            target = args.output
            print(int8.describe_report(report))
            if args.evaluate:
                import tempfile
                with tempfile.TemporaryDirectory() as work:
                    losses = int8.evaluate_int8(args.checkpoint_dir, args.output, work)
                print(f"validation loss: fp32 {losses['fp32']:.4f}, int8 {losses['int8']:.4f} "
                      f"({losses['relative_change']:+.3%})")
        elif args.command == "export" and args.format == "hf":
            for path in hf.export_hf(args.checkpoint_dir, args.output):
                print(path)
            target = args.output
        elif args.command == "export":
            config = myriad.export_safetensors(args.checkpoint_dir, args.output)
            print(f"{args.output}\n{config}")
            target = args.output
        elif args.format == "hf":
            checkpoint, config = hf.import_hf(args.paths[0], args.paths[1], args.config_out, args.data,
                                               args.tokenizer)
            print(f"{checkpoint}\n{config}")
            target = checkpoint
        else:
            target = myriad.import_safetensors(*args.paths)
            print(target)
    except (myriad.Error, hf.HfError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        audit_conversion(audit, args, target, e)
        return 2
    return audit_conversion(audit, args, target)


def audit_conversion(audit, args, target, error=None):
    """Records the conversion in the audit log (a no-op without an audit key); 0, or 2 when the log
    refuses it (the error printed)."""
    try:
        audit.record_conversion(args, target, error)
    except (audit.AuditError, OSError) as e:
        print(f"error: audit log: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
