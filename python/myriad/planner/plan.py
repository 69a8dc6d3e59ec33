"""myriad plan: will it fit, how fast, which layout — searched over every layout the engine accepts.

`plan(config, gpus, ...)` takes a config (the model, the global batch, the sequence length, the
precision; its parallel section is a starting point, not a constraint) and a cluster (GPU kind,
GPUs per node, link classes, an optional machine profile). It enumerates layouts (tp within a node,
pp, virtual stages, cp, ep, dp = the rest, micro-batch, ZeRO stage, recompute, sequence
parallelism), keeps those the engine's own config validation accepts (the same checks a run makes:
a refused layout is counted under its reason), computes each one's per-rank memory (memory.py:
equal to the dry run) and step time (step_time.py), and ranks the layouts that fit by tokens/s.
Fitting means the most loaded rank's bytes stay under the device memory less `headroom` (a share
kept for the CUDA context, allocator fragmentation, kernel workspaces and communication buffers,
which the model does not count). The best layouts come back with their binding constraint and as
a complete config (YAML) ready to run.

During the search the memory of a layout is that of its first and last pipeline stage at tp, cp,
dp and ep coordinate 0 (ranks of one stage differ by a few ZeRO shard elements at most); the
layouts reported are then checked on every rank role (memory.peak_rank_memory).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from . import memory
from .hardware import hardware_from
from .layout import Layout, PlanInput, read_config
from .step_time import ENGINES, MYRIAD, EngineTraits, step_time

GB = 1e9


@dataclass
class Candidate:
    layout: Layout
    overrides: tuple  # the config keys that make this layout ("parallel.tp=8", ...)
    peak: memory.RankMemory | None = None
    step: object = None  # step_time.StepTime
    fits: bool = False
    binding: str = ""

    @property
    def memory_bytes(self) -> int:
        return self.peak.total_bytes if self.peak else 0


@dataclass
class PlanResult:
    inp: PlanInput
    gpus: int
    hardware: object
    capacity_bytes: int
    usable_bytes: int
    best: list = field(default_factory=list)  # fitting candidates, fastest first
    closest: list = field(default_factory=list)  # when nothing fits: the smallest footprints
    examined: int = 0
    engine_checked: int = 0  # of them, validated by the engine one by one (the rest left out by its rules first)
    refused: dict = field(default_factory=dict)  # engine refusal reason -> count
    too_big: int = 0
    config_text: str = ""  # the config the search started from (YAML)

    def yaml(self, candidate: Candidate) -> str:
        return layout_yaml(self.config_text, candidate, self.gpus)


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def layout_overrides(lay: Layout, global_batch: int) -> tuple:
    """The config keys of a layout (the values every run of it sets)."""
    return (f"parallel.tp={lay.tp}", f"parallel.pp={lay.pp}", f"parallel.dp={lay.dp}", f"parallel.cp={lay.cp}",
            f"parallel.ep={lay.ep}", f"parallel.virtual_stages={lay.virtual_stages}",
            f"parallel.pp_schedule={lay.schedule}", f"parallel.zero_stage={lay.zero_stage}",
            f"parallel.sequence_parallel={'true' if lay.sequence_parallel else 'false'}",
            f"training.micro_batch={lay.micro_batch}", f"training.gradient_accumulation={lay.gradient_accumulation}",
            f"training.global_batch_size={global_batch}", f"training.recompute={lay.recompute}")


LAYOUT_TOKEN = re.compile(r"(tp|pp|v|dp|cp|ep|z)(\d+)|mb(\d+)x(\d+)|(sp)|rc-(none|selective|full)")


def parse_layout(text: str, global_batch: int) -> tuple:
    """The config keys of a layout written as the table prints it ("tp4 pp16 v2 dp8 cp2 ep4 mb1x96
    z1 sp rc-selective"; left out: v1, cp1, ep1, no sp, rc none); ValueError naming a bad word."""
    values = {"tp": 1, "pp": 1, "v": 1, "dp": 1, "cp": 1, "ep": 1, "z": 0, "mb": None, "sp": False, "rc": "none"}
    for word in text.split():
        match = LAYOUT_TOKEN.fullmatch(word)
        if not match:
            raise ValueError(f"--explain: '{word}' is not a layout word (tpN ppN vN dpN cpN epN mbAxB zN sp rc-MODE)")
        if match.group(1):
            values[match.group(1)] = int(match.group(2))
        elif match.group(3):
            values["mb"] = (int(match.group(3)), int(match.group(4)))
        elif match.group(5):
            values["sp"] = True
        else:
            values["rc"] = match.group(6)
    if values["mb"] is None:
        raise ValueError("--explain: the layout needs its micro-batches, mbAxB (micro-batch A, B per step)")
    lay = Layout(tp=values["tp"], pp=values["pp"], dp=values["dp"], cp=values["cp"], ep=values["ep"],
                 virtual_stages=values["v"], schedule="interleaved" if values["v"] > 1 else "1f1b",
                 zero_stage=values["z"], sequence_parallel=values["sp"], recompute=values["rc"],
                 micro_batch=values["mb"][0], gradient_accumulation=values["mb"][1])
    return layout_overrides(lay, global_batch)


def format_breakdown(candidate: Candidate, recompute_s: float | None = None) -> str:
    """Where a layout's step goes: compute by op class (and recompute's share), communication per
    axis issued and exposed, bubble, optimizer."""
    st = candidate.step
    exposed = ", ".join(f"{axis} {s:.3g}" for axis, s in st.exposed_comm_s.items() if s > 0) or "none"
    lines = [f"{candidate.layout.describe()}: step {st.total_s:.3g} s = compute {st.compute_s:.3g} s + exposed "
             f"communication {st.exposed_comm_total_s:.3g} s ({exposed}) + bubble {st.bubble_s:.3g} s + optimizer "
             f"{st.optimizer_s:.3g} s; binding: {st.binding}",
             "  compute by op class: " + ", ".join(f"{k} {v:.3g} s" for k, v in st.compute_by_class_s.items())
             + (f"; recompute's share {recompute_s:.3g} s" if recompute_s is not None else ""),
             "  communication per axis, issued / exposed: "
             + (", ".join(f"{axis} {st.comm_s[axis]:.3g} / {st.exposed_comm_s.get(axis, 0.0):.3g} s"
                          for axis in st.comm_s if st.comm_s[axis] > 0) or "none")]
    lines += [f"  note: {note}" for note in st.notes]
    return "\n".join(lines)


def _engine_refusal(base_config, overrides: tuple, gpus: int):
    """None when the engine's config validation accepts the layout (its overrides on a copy of the parsed
    `base_config`), else its first line."""
    from .. import _myriad
    config = base_config.copy()
    try:
        for item in overrides:
            config.set(item)
        config.validate(gpus)
    except _myriad.Error as e:
        return re.sub(r"\d+", "N", str(e).split("] ", 1)[-1])  # one reason for every size it applies to
    return None


def layout_yaml(config_text: str, candidate: Candidate, gpus: int) -> str:
    """The whole config with the layout's keys set (the engine's YAML writer), ready for myriad-train."""
    from .. import _myriad
    config = _myriad.Config.from_string(config_text, "plan")
    for item in candidate.overrides:
        config.set(item)
    config.validate(gpus)
    lay = candidate.layout
    head = (f"# myriad plan: {lay.describe()} on {gpus} ranks; per-rank memory "
            f"{candidate.memory_bytes / GB:.1f} GB")
    if candidate.step is not None:
        head += f"; step {candidate.step.total_s:.3g} s, {candidate.step.tokens_per_s:,.0f} tokens/s, " \
                f"MFU {100 * candidate.step.mfu:.1f} %"
    return head + "\n" + config.to_yaml()


PRUNED_MOE_MICRO_BATCH = ("training.micro_batch must be a multiple of parallel.tp for a mixture of experts "
                          "(left out before the engine's check)")
PRUNED_INTERLEAVED = ("the interleaved schedule needs the micro-batches per step (training.gradient_accumulation) "
                      "divisible by parallel.pp (left out before the engine's check)")


def enumerate_layouts(inp: PlanInput, gpus: int, gpus_per_node: int, space: dict | None = None,
                      skipped: dict | None = None):
    """Every layout of `gpus` ranks for the model and global batch of `inp` (engine checks come later).
    `skipped` (when given) counts the combinations left out before any check, by reason."""
    space = space or {}
    skipped = {} if skipped is None else skipped

    def skip(reason, layouts=1):
        skipped[reason] = skipped.get(reason, 0) + layouts

    model, batch = inp.model, inp.batch
    global_batch = batch.global_batch
    tps = space.get("tp") or [t for t in _divisors(gpus_per_node) if gpus % t == 0]
    for tp in tps:
        for pp in space.get("pp") or [p for p in _divisors(model.n_layer) if (gpus // tp) % p == 0]:
            for cp in space.get("cp") or [c for c in (1, 2, 4, 8, 16) if (gpus // (tp * pp)) % c == 0]:
                rest = gpus // (tp * pp * cp)
                if tp * pp * cp * rest != gpus:
                    continue
                dp = rest
                if global_batch % dp:
                    skip(f"dp = {gpus} GPUs / (tp x pp x cp) does not divide the global batch of {global_batch} "
                         "sequences (training.micro_batch x gradient_accumulation x dp)")
                    continue
                eps = space.get("ep") or ([e for e in _divisors(dp) if model.num_experts % e == 0]
                                          if model.is_moe else [1])
                vs = space.get("virtual_stages") or ([1, 2] if pp > 1 else [1])
                for ep in eps:
                    for v in vs:
                        if model.n_layer % (pp * v):
                            continue
                        schedule = "interleaved" if v > 1 else "1f1b"
                        for mb in space.get("micro_batch") or [b for b in (1, 2, 4, 8, 16) if
                                                                (global_batch // dp) % b == 0]:
                            ga = global_batch // (dp * mb)
                            if ga < 1:
                                continue
                            # Two of the engine's rules, applied before its check (which costs a config
                            # parse per layout): tested to be refusals of the engine's own validation.
                            zeros = space.get("zero_stage") or ([0, 1] if pp > 1 else [0, 1, 2, 3])
                            recomputes = space.get("recompute") or ["none", "selective", "full"]
                            if model.is_moe and mb % tp:
                                skip(PRUNED_MOE_MICRO_BATCH, len(zeros) * len(recomputes))
                                continue
                            if v > 1 and ga % pp:
                                skip(PRUNED_INTERLEAVED, len(zeros) * len(recomputes))
                                continue
                            for zero in zeros:
                                for recompute in recomputes:
                                    yield Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, virtual_stages=v, schedule=schedule,
                                                 zero_stage=zero, sequence_parallel=tp > 1, recompute=recompute,
                                                 micro_batch=mb, gradient_accumulation=ga,
                                                 bucket_mb=inp.layout.bucket_mb)


def _search_memory(inp: PlanInput) -> memory.RankMemory:
    lay = inp.layout
    ranks = {memory.rank_of(lay, memory.GridCoord(pp=0)), memory.rank_of(lay, memory.GridCoord(pp=lay.pp - 1))}
    return max((memory.rank_memory(inp, r) for r in ranks), key=lambda m: m.total_bytes)


def plan(config, gpus: int, gpu: str = "h100", gpus_per_node: int = 8, intra: str = "", inter: str = "ib400",
         profile=None, headroom: float = 0.10, top: int = 5, space: dict | None = None, overrides=(),
         hardware=None, engine: EngineTraits = MYRIAD) -> PlanResult:
    """Search the layouts of `config` on `gpus` GPUs; see the module docstring."""
    if gpus < 1:
        raise ValueError(f"gpus {gpus} must be >= 1")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom {headroom} must be in [0, 1)")
    base = read_config(config, 0, overrides)
    hw = hardware or hardware_from(gpu, gpus_per_node, intra, inter, profile)
    capacity = hw.device.hbm_bytes if hw.device is not None else int(1 << 62)
    result = PlanResult(inp=base, gpus=gpus, hardware=hw, capacity_bytes=capacity,
                        usable_bytes=int(capacity * (1 - headroom)), config_text=base.config_yaml)
    fitting, sized = [], []
    skipped = {}
    from .. import _myriad
    base_config = _myriad.Config.from_string(base.config_yaml, "plan")  # parsed once, copied per layout
    for lay in enumerate_layouts(base, gpus, hw.gpus_per_node, space, skipped):
        result.examined += 1
        overrides_of = layout_overrides(lay, base.batch.global_batch)
        refusal = _engine_refusal(base_config, overrides_of, gpus)
        if refusal is not None:
            result.refused[refusal] = result.refused.get(refusal, 0) + 1
            continue
        inp = dataclasses.replace(base, layout=lay)
        cand = Candidate(layout=lay, overrides=overrides_of, peak=_search_memory(inp))
        if cand.memory_bytes > result.usable_bytes:
            result.too_big += 1
            cand.binding = f"memory ({cand.memory_bytes / GB:.1f} GB > {result.usable_bytes / GB:.1f} GB)"
            sized.append(cand)
            continue
        try:
            cand.step = step_time(inp, hw, engine)
        except ValueError as e:  # a rule the step-time model knows and the config check did not
            reason = re.sub(r"\d+", "N", str(e))  # one reason for every size it applies to
            result.refused[reason] = result.refused.get(reason, 0) + 1
            continue
        cand.fits = True
        cand.binding = cand.step.binding
        fitting.append(cand)
    result.engine_checked = result.examined
    for reason in (PRUNED_MOE_MICRO_BATCH, PRUNED_INTERLEAVED):  # engine refusals, counted as such
        if reason in skipped:
            result.refused[reason] = skipped.pop(reason)
            result.examined += result.refused[reason]
    if result.examined == 0:
        for reason, count in skipped.items():
            result.refused[reason] = result.refused.get(reason, 0) + count
        if not skipped:
            result.refused[f"no tp divides both the {hw.gpus_per_node} GPUs per node and the {gpus} GPUs, with pp "
                           f"a divisor of the {base.model.n_layer} layers"] = 1
    fitting.sort(key=lambda c: (-c.step.tokens_per_s, c.memory_bytes))
    for cand in fitting:  # every rank role of the layouts reported (the search sized two)
        if len(result.best) == top:
            break
        cand.peak = memory.peak_rank_memory(dataclasses.replace(base, layout=cand.layout))
        cand.fits = cand.memory_bytes <= result.usable_bytes
        if cand.fits:
            result.best.append(cand)
        else:
            result.too_big += 1
    if not result.best:
        sized.sort(key=lambda c: c.memory_bytes)
        result.closest = sized[:top]
    return result


def format_table(result: PlanResult) -> str:
    """The plan as a fixed-width table (fastest fitting layouts, or the smallest when none fits)."""
    inp, hw = result.inp, result.hardware
    m = inp.model
    lines = [f"model: {m.family}{' MoE' if m.is_moe else ''} L {m.n_layer} C {m.n_embd} H {m.n_head}/{m.n_kv_head} "
             f"V {m.vocab_size}; batch {inp.batch.global_batch} x {inp.batch.seq_len} tokens, {inp.batch.precision}",
             f"cluster: {result.gpus} x {hw.name} ({hw.gpus_per_node} per node, intra {hw.intra.name}, inter "
             f"{hw.inter.name if hw.inter else 'none'}); usable memory per rank {result.usable_bytes / GB:.1f} GB "
             f"of {result.capacity_bytes / GB:.1f} GB",
             f"searched {result.examined} layouts: {len(result.best)} shown, {result.too_big} too big, "
             f"{sum(result.refused.values())} refused by the engine's checks"
             + (f" ({result.examined - result.engine_checked} of them by its rules before the check)"
                if result.engine_checked and result.examined > result.engine_checked else "")]
    rows = result.best or result.closest
    if not rows:
        lines.append("no layout of this model fits the world size (the reasons below)")
    else:
        if not result.best:
            lines.append("NOTHING FITS: the smallest footprints are")
        header = f"{'layout':<44} {'mem GB':>7} {'weights':>8} {'grads':>7} {'optim':>7} {'acts':>7} " \
                 f"{'step s':>8} {'tok/s':>11} {'MFU':>6}  binding"
        lines += [header, "-" * len(header)]
        for c in rows:
            p = c.peak
            step = c.step
            lines.append(f"{c.layout.describe():<44} {c.memory_bytes / GB:>7.1f} "
                         f"{(p.master_weight_bytes + p.compute_weight_bytes) / GB:>8.1f} {p.gradient_bytes / GB:>7.1f} "
                         f"{p.optimizer_bytes / GB:>7.1f} {p.activation_bytes / GB:>7.1f} "
                         + (f"{step.total_s:>8.3g} {step.tokens_per_s:>11,.0f} {100 * step.mfu:>5.1f}%"
                            if step else f"{'-':>8} {'-':>11} {'-':>6}") + f"  {c.binding}")
    unmodelled = inp.batch.unmodelled_exchange()
    if unmodelled and any(c.step for c in rows):
        lines.append("note: step times assume the exact ring all-reduce of dp every step; not timed: " +
                     "; ".join(unmodelled))
    if result.refused:
        lines.append("left out or refused by the engine's checks (count: reason):")
        for reason, count in sorted(result.refused.items(), key=lambda kv: -kv[1])[:8]:
            lines.append(f"  {count:>6}: {reason}")
    return "\n".join(lines)


def evaluate(config, gpus: int, gpu: str = "h100", gpus_per_node: int = 8, intra: str = "", inter: str = "ib400",
             profile=None, headroom: float = 0.10, overrides=(), hardware=None,
             engine: EngineTraits = MYRIAD) -> PlanResult:
    """The config's own layout only ("will it fit, how fast?"): every rank role's memory and the step time."""
    inp = read_config(config, gpus, overrides)
    hw = hardware or hardware_from(gpu, gpus_per_node, intra, inter, profile)
    capacity = hw.device.hbm_bytes if hw.device is not None else int(1 << 62)
    result = PlanResult(inp=inp, gpus=gpus, hardware=hw, capacity_bytes=capacity,
                        usable_bytes=int(capacity * (1 - headroom)), config_text=inp.config_yaml, examined=1)
    cand = Candidate(layout=inp.layout, overrides=layout_overrides(inp.layout, inp.batch.global_batch),
                     peak=memory.peak_rank_memory(inp))
    cand.fits = cand.memory_bytes <= result.usable_bytes
    cand.step = step_time(inp, hw, engine)
    if cand.fits:
        cand.binding = cand.step.binding
        result.best = [cand]
    else:
        cand.binding = f"memory ({cand.memory_bytes / GB:.1f} GB > {result.usable_bytes / GB:.1f} GB)"
        result.too_big = 1
        result.closest = [cand]
    return result


def dry_run_table(config, gpus: int, candidate: Candidate) -> tuple:
    """Every rank role of a layout built by the engine on the meta device next to the planner's bytes.

    Returns (text, mismatches): mismatches lists the roles where a field differs (it must be empty)."""
    from .. import _myriad
    cfg = _myriad.Config.from_string(candidate_config_text(config, candidate, gpus), "plan")
    inp = read_config(cfg, gpus)
    lines = [f"{'role':<46} {'planner GB':>11} {'dry run GB':>11} {'slots':>5}  equal"]
    mismatches = []
    fields = ("parameter_elements", "shard_elements", "optimizer_elements", "master_weight_bytes",
              "compute_weight_bytes", "gradient_bytes", "optimizer_bytes", "activation_bytes", "activation_slots")
    for rank in memory.rank_roles(inp.layout):
        dry = _myriad.dry_run(cfg, gpus, rank)
        planned = memory.rank_memory(inp, rank)
        differ = [f for f in fields if getattr(planned, f) != dry[f]]
        if differ or planned.total_bytes != dry["total_bytes"]:
            mismatches.append((dry["role"], differ))
        lines.append(f"{dry['role']:<46} {planned.total_bytes / GB:>11.3f} {dry['total_bytes'] / GB:>11.3f} "
                     f"{dry['activation_slots']:>5}  {'yes' if not differ else 'NO: ' + ', '.join(differ)}")
    return "\n".join(lines), mismatches


def candidate_config_text(config, candidate: Candidate, gpus: int) -> str:
    base = read_config(config, 0)
    return layout_yaml(base.config_yaml, candidate, gpus)


def _recompute_share(args, cand: Candidate) -> float | None:
    """Seconds of the step's compute that recompute adds: the layout costed again without it."""
    if cand.layout.recompute == "none":
        return None
    plain = dataclasses.replace(read_config(args.config, args.gpus, tuple(args.set)),
                                layout=dataclasses.replace(cand.layout, recompute="none"))
    hw = hardware_from(args.gpu, args.gpus_per_node, args.intra, args.inter, args.profile)
    return cand.step.compute_s - step_time(plain, hw, ENGINES[args.engine]).compute_s


def main(argv=None):
    """myriad plan: the command line (docs/planning.md)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="myriad plan", description="will it fit, how fast, which layout: per-rank "
                                     "memory and step time of a config's layouts on a cluster (docs/planning.md)")
    parser.add_argument("--config", required=True, help="run config (YAML): the model, batch, precision")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs (ranks) in the job")
    parser.add_argument("--gpu", default="h100", help="h100 | h200 | a100 | b200 | cpu_host (needs --profile)")
    parser.add_argument("--gpus-per-node", type=int, default=None,
                        help="GPUs (ranks) per node (default: 8 for GPUs, the profile's ranks per node for cpu_host)")
    parser.add_argument("--intra", default="",
                        help="nvlink3 | nvlink4 | nvlink5 | pcie4 | pcie5 (default: the GPU's NVLink)")
    parser.add_argument("--inter", default="ib400", help="ib200 | ib400 | ib800 | roce200 | opa4x100 | none")
    parser.add_argument("--profile", help="machine profile JSON written by the benchmarks (calibration)")
    parser.add_argument("--engine", default="myriad", choices=list(ENGINES),
                        help="whose kernels and overlap the step time assumes: myriad (what myriad-train runs), or a "
                             "published system's traits to compare with its measured runs (docs/planning.md)")
    parser.add_argument("--headroom", type=float, default=0.10, help="share of device memory kept free")
    parser.add_argument("--top", type=int, default=5, help="layouts to show")
    parser.add_argument("--no-search", action="store_true", help="evaluate the config's own layout only")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--yaml", help="write the best layout's config here (ready for myriad-train)")
    parser.add_argument("--dry-run", action="store_true",
                        help="build every rank role of the best layout on the meta device and compare")
    parser.add_argument("--explain", nargs="?", const="", metavar="LAYOUT",
                        help="where the step goes (compute by class, recompute, communication per axis issued and "
                             "exposed, bubble) for the layouts shown; with LAYOUT as the table writes it "
                             "('tp4 pp16 dp16 mb1x96 z1 sp'), cost that one layout")
    args = parser.parse_args(argv)
    if args.gpus_per_node is not None and args.gpus_per_node < 1:
        print(f"error: --gpus-per-node must be >= 1, got {args.gpus_per_node} (leave it out for the default: 8 GPUs, "
              "or the profile's ranks per node for cpu_host)", file=sys.stderr)
        return 2
    if args.gpus < 1:
        print(f"error: --gpus must be >= 1, got {args.gpus}", file=sys.stderr)
        return 2
    args.gpus_per_node = args.gpus_per_node or 0
    from .. import _myriad
    try:
        if args.explain:
            base = read_config(args.config, 0, tuple(args.set))
            args.set = [*args.set, *parse_layout(args.explain, base.batch.global_batch)]
            args.no_search = True
        if args.no_search:
            result = evaluate(args.config, args.gpus, args.gpu, args.gpus_per_node, args.intra, args.inter,
                              args.profile, args.headroom, tuple(args.set), engine=ENGINES[args.engine])
        else:
            result = plan(args.config, args.gpus, args.gpu, args.gpus_per_node, args.intra, args.inter, args.profile,
                          args.headroom, args.top, overrides=tuple(args.set), engine=ENGINES[args.engine])
    except (ValueError, _myriad.Error) as e:
        print(f"error: {str(e).split('] ', 1)[-1]}", file=sys.stderr)
        return 2
    print(format_table(result))
    if args.explain is not None:
        print("\nbreakdown:")
        for cand in [c for c in (result.best or result.closest) if c.step is not None]:
            print(format_breakdown(cand, _recompute_share(args, cand)))
    chosen = (result.best or result.closest or [None])[0]
    if chosen is None:
        return 1
    if result.best:
        print("\nbest layout as a config (the keys it sets):\n  " + " ".join(f"--set {o}" for o in chosen.overrides))
    if args.yaml:
        with open(args.yaml, "w") as f:
            f.write(result.yaml(chosen))
        print(f"wrote {args.yaml}")
    if args.dry_run:
        text, mismatches = dry_run_table(args.config, args.gpus, chosen)
        print("\ndry run (the engine builds each rank role at full size on the meta device):\n" + text)
        if mismatches:
            print(f"error: the planner differs from the dry run on {len(mismatches)} roles", file=sys.stderr)
            return 3
    return 0 if result.best else 1
