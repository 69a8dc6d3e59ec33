"""Launch flags of python/train.py: the cluster-training recipe's launch-flag style (`--batch_size=4M --lr 6e-5
--checkpoint_activations --log_dir DIR ...`) as aliases of config keys.

Pure functions, no MPI and no extension module: `translate(argv)` splits a command line into the
driver's own options (`--config`, `--set`, `-h/--help`, passed on to argparse) and a list of
`Setting`s (config key = value, in command-line order); `batch_size_in_sequences()` turns a
`--batch_size` given in tokens into sequences once the sequence length is known (the driver reads
it from the config through the generic binding: `config.resolved()["training.seq_len"]`). A flag
that does not apply, an unknown flag or a bad value raises `LaunchFlagError` with a one-line
message (the driver prints it and exits 2). `FLAG_TABLE` is the one table of these flags
(docs/launch.md shows the same text).

Order (documented in docs/launch.md): the config file, then these flags in command-line order,
then `--set` overrides — so `--set` wins over a flag and a flag over the file.
"""
import difflib
import functools
import re
from typing import List, NamedTuple, Optional, Tuple


class LaunchFlagError(ValueError):
    """A flag the driver cannot take; str(e) is the one-line message shown to the user."""


class Setting(NamedTuple):
    """One config assignment coming from a flag. `tokens` is set (and `value` is None) for a
    `--batch_size` given in tokens, converted later by `batch_size_in_sequences`."""
    flag: str
    key: str
    value: Optional[str]
    tokens: Optional[int] = None

    def override(self):
        return f"{self.key}={self.value}"


# Binary multipliers: --batch_size=4M is 4 * 2^20 tokens (2048 sequences of 2048 tokens).
TOKEN_SUFFIXES = {"k": 1 << 10, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

# flag, config key (or what it sets), value, meaning — the table of docs/launch.md and --help.
FLAG_ROWS = [
    ("--config FILE", "(the config file)", "path", "YAML run configuration (docs/config.md); required"),
    ("--set KEY=VALUE", "any key", "KEY=VALUE", "override one config key, repeatable; applied last, so it wins"),
    ("--log_dir DIR", "logging.dir", "path", "run directory: logs, metrics.jsonl, config.yaml, checkpoints"),
    ("--batch_size N", "training.global_batch_size", "N or N{k,M,G}",
     "N sequences per step; with a suffix N tokens per step (k=2^10, M=2^20, G=2^30), divided by the "
     "sequence length (training.seq_len, or model.context_length when 0) and refused if it does not divide"),
    ("--micro_batch N", "training.micro_batch", "int", "sequences per micro-batch per data-parallel rank"),
    ("--gradient_accumulation N", "training.gradient_accumulation", "int",
     "micro-batches per step per dp rank; with --batch_size and no --micro_batch, training.micro_batch is derived "
     "as batch / (accumulation x dp), as DeepSpeed does (refused when it does not divide)"),
    ("--seq_length N", "training.seq_len", "int", "tokens per sequence (at most model.context_length)"),
    ("--lr X", "training.lr", "float", "peak learning rate"),
    ("--warmup N", "training.warmup_steps", "int", "linear warmup steps"),
    ("--optimizer NAME", "training.optimizer", "adamw | onebit_adam",
     "AdamW, or 1-bit Adam (DeepSpeed's OneBitAdam: compressed momentum after training.freeze_step)"),
    ("--checkpoint_activations", "training.recompute=full", "(no value)", "recompute each block in backward"),
    ("--fp16 / --bf16", "training.precision", "(no value)", "fp16 (dynamic loss scaling) or bf16 compute"),
    ("--resume [PATH|auto]", "checkpoint.resume", "path or auto", "continue from a checkpoint; bare --resume = auto"),
]


def flag_table_text():
    """The flag table as aligned plain text (the driver's --help epilog)."""
    widths = [max(len(row[i]) for row in FLAG_ROWS) for i in range(3)]
    lines = ["launch flags (each also as --flag=value; applied after the config file, before --set):"]
    for flag, key, _value, meaning in FLAG_ROWS:
        lines.append(f"  {flag:<{widths[0]}}  {key:<{widths[1]}}  {meaning}")
    lines.append("exit codes: 0 done or preempted (checkpoint written); 2 bad input (config, flags, data, "
                 "checkpoint) or training.max_nonfinite_steps reached - the same command fails the same way; "
                 "3 any other failure (python -m myriad.run restarts it). See docs/launch.md.")
    return "\n".join(lines)


def flag_table_markdown():
    """The flag table as a Markdown table (docs/launch.md carries this text)."""
    def cell(text, code):
        text = text.replace("|", "\\|")
        return f"`{text}`" if code else text

    lines = ["| flag | config key | value | meaning |", "|---|---|---|---|"]
    for flag, key, value, meaning in FLAG_ROWS:
        lines.append(f"| {cell(flag, True)} | {cell(key, '.' in key)} | {cell(value, False)} | "
                     f"{cell(meaning, False)} |")
    return "\n".join(lines)


# Flags that take a value: name -> config key (its value checked as the key's type: _key_kind).
VALUE_FLAGS = {
    "log_dir": "logging.dir",
    "micro_batch": "training.micro_batch",
    "gradient_accumulation": "training.gradient_accumulation",
    "seq_length": "training.seq_len",
    "lr": "training.lr",
    "warmup": "training.warmup_steps",
}


@functools.lru_cache(maxsize=None)
def _key_kind(key):
    """'int', 'float' or 'path': the type of the key's value in the engine's own config (its Field
    table), so a flag's check follows the key it sets; None before the extension is built (the
    engine then checks the value when it reads the override)."""
    try:
        from myriad import _myriad
    except ImportError:
        return None
    value = _myriad.Config.from_string("logging: {}", "defaults")[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "path"
    return "int" if isinstance(value, int) else "float"


# Flags that do not apply, with what to use instead.
NOT_APPLICABLE = {
    "model_type": "the model comes from the config's model: section (n_layer, n_head, n_embd, ...; docs/config.md), "
                  "e.g. --set model.n_layer=40",
    "memory_fraction": "myriad allocates what the model needs (the start-up line shows memory per rank); "
                       "to use less, lower --micro_batch, add --checkpoint_activations or "
                       "--set parallel.zero_stage=1..3",
    "num_nodes": "the launcher decides the ranks: mpirun -np N -hostfile hostfile python3 python/train.py ... "
                 "(docs/launch.md)",
    "num_gpus": "the launcher decides the ranks: mpirun -np N ... with one rank per GPU and "
                "--set training.device=cuda (docs/launch.md)",
    "local_rank": "ranks come from the MPI launcher (mpirun), not from a flag",
    "deepspeed": "myriad is not DeepSpeed: ZeRO is --set parallel.zero_stage=1..3 (docs/parallelism.md)",
    "deepspeed_config": "myriad is not DeepSpeed: put the settings in the --config YAML (docs/config.md)",
}

DRIVER_OPTIONS = {"config", "set"}
KNOWN = (set(VALUE_FLAGS) | {"batch_size", "optimizer", "checkpoint_activations", "fp16", "bf16", "resume"}
         | DRIVER_OPTIONS)


def _name(token):
    """'--seq-length=2048' -> ('seq_length', '2048'); '--fp16' -> ('fp16', None)."""
    body = token[2:]
    name, eq, value = body.partition("=")
    return name.replace("-", "_"), (value if eq else None)


def _check_number(flag, kind, value):
    try:
        if kind == "int":
            if not re.fullmatch(r"[+]?\d+", value):
                raise ValueError
        elif kind == "float":
            float(value)
    except ValueError as err:
        what = "an integer" if kind == "int" else "a number"
        raise LaunchFlagError(f"{flag}: expected {what}, got '{value}'") from err
    return value


def parse_batch_size(value):
    """'64' -> (64, None) sequences; '4M' -> (None, 4194304) tokens. Raises LaunchFlagError."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKMG]?)\s*", value)
    if not m:
        raise LaunchFlagError(f"--batch_size: expected a number of sequences (e.g. 512) or of tokens with a suffix "
                              f"k, M or G (e.g. 4M = 4*2^20 tokens), got '{value}'")
    number, suffix = m.group(1), m.group(2)
    if not suffix:
        if "." in number or int(number) <= 0:
            raise LaunchFlagError(f"--batch_size: expected a positive whole number of sequences, got '{value}'")
        return int(number), None
    tokens = float(number) * TOKEN_SUFFIXES[suffix]
    if tokens != int(tokens) or tokens <= 0:
        raise LaunchFlagError(f"--batch_size={value} is not a positive whole number of tokens")
    return None, int(tokens)


def batch_size_in_sequences(tokens, seq_len, text=None):
    """Sequences per step for `tokens` tokens of `seq_len` each; refuses, showing the arithmetic,
    when seq_len does not divide tokens."""
    shown = f"--batch_size={text} ({tokens} tokens)" if text else f"--batch_size of {tokens} tokens"
    if seq_len <= 0:
        raise LaunchFlagError(f"{shown}: the sequence length is {seq_len}; set --seq_length")
    if tokens % seq_len != 0:
        low, high = tokens // seq_len, tokens // seq_len + 1
        raise LaunchFlagError(f"{shown} is not a whole number of sequences of {seq_len} tokens: {tokens} / {seq_len} = "
                              f"{tokens / seq_len:g}; use {low * seq_len} ({low} sequences) or {high * seq_len} "
                              f"({high} sequences) tokens, or give --batch_size in sequences")
    return tokens // seq_len


def translate(argv: List[str]) -> Tuple[List[str], List[Setting]]:
    """Splits argv into (the driver's own arguments for argparse, the settings of launch flags).
    Both `--flag value` and `--flag=value`; `-` and `_` are the same in flag names. Raises
    LaunchFlagError for a flag that does not apply, an unknown flag, a stray word or a bad value."""
    driver, settings = [], []
    precision_flag = None
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token in ("-h", "--help"):
            driver.append(token)
            continue
        if not token.startswith("--") or token == "--":
            raise LaunchFlagError(f"unexpected argument '{token}': the driver takes --config FILE, --set KEY=VALUE and "
                                  "the launch flags of docs/launch.md (python3 python/train.py --help)")
        name, inline = _name(token)
        flag = token.partition("=")[0]  # as the user spelled it

        def value_of(what, inline=inline, flag=flag):
            nonlocal i
            if inline is not None:
                return inline
            if i < len(argv) and not argv[i].startswith("--"):
                i += 1
                return argv[i - 1]
            raise LaunchFlagError(f"{flag} needs a value ({what})")

        if name in DRIVER_OPTIONS:
            driver += ["--" + name, value_of("KEY=VALUE" if name == "set" else "a path")]
        elif name in VALUE_FLAGS:
            key = VALUE_FLAGS[name]
            kind = _key_kind(key)
            value = value_of({"path": "a path", "int": "an integer", "float": "a number"}.get(kind, "a value"))
            settings.append(Setting(flag, key, _check_number(flag, kind, value)))
        elif name == "batch_size":
            text = value_of("sequences, or tokens with a suffix k, M, G")
            sequences, tokens = parse_batch_size(text)
            if tokens is None:
                settings.append(Setting(flag, "training.global_batch_size", str(sequences)))
            else:
                settings.append(Setting(f"{flag}={text}", "training.global_batch_size", None, tokens))
        elif name == "optimizer":
            value = value_of("adamw or onebit_adam").strip("'\"")
            spelled = {"adamw": "adamw", "onebit_adam": "onebit_adam", "onebitadam": "onebit_adam"}
            if value.lower() not in spelled:
                raise LaunchFlagError(f"--optimizer {value}: not available; the optimizers are adamw (AdamW: "
                                      "training.beta1, beta2, adam_eps, weight_decay) and onebit_adam (1-bit Adam: "
                                      "training.freeze_step)")
            settings.append(Setting(flag, "training.optimizer", spelled[value.lower()]))
        elif name == "checkpoint_activations":
            if inline is not None and inline.lower() not in ("true", "1", "yes", "false", "0", "no"):
                raise LaunchFlagError(f"--checkpoint_activations takes no value (or true/false), got '{inline}'")
            off = inline is not None and inline.lower() in ("false", "0", "no")
            settings.append(Setting(flag, "training.recompute", "none" if off else "full"))
        elif name in ("fp16", "bf16"):
            if inline is not None:
                raise LaunchFlagError(f"{flag} takes no value, got '{inline}'")
            if precision_flag and precision_flag != flag:
                raise LaunchFlagError(f"{precision_flag} and {flag} both given: choose one precision")
            precision_flag = flag
            settings.append(Setting(flag, "training.precision", name))
        elif name == "resume":
            if inline is not None:
                value = inline or "auto"
            elif i < len(argv) and not argv[i].startswith("-"):
                value = argv[i]
                i += 1
            else:
                value = "auto"
            settings.append(Setting(flag, "checkpoint.resume", value))
        elif name in NOT_APPLICABLE:
            raise LaunchFlagError(f"{flag} does not apply to myriad: {NOT_APPLICABLE[name]}")
        else:
            close = difflib.get_close_matches(name, sorted(KNOWN | set(NOT_APPLICABLE)), n=1)
            hint = f"did you mean --{close[0]}? " if close else ""
            raise LaunchFlagError(f"unknown flag {flag}: {hint}the driver takes --config FILE, --set KEY=VALUE and the "
                                  "launch flags of docs/launch.md (python3 python/train.py --help)")
    return driver, settings
