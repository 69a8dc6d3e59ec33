"""Hardware for the planner's step-time model: GPU datasheets, link classes, per-op-class rates, and
the machine profile that calibrates them.

What this file holds, and where every number comes from:

- `DEVICES`: dense peak FLOP/s (16-bit tensor core, TF32 tensor core, FP32 without tensor cores),
  HBM capacity and bandwidth of H100 SXM, H200 SXM, A100 SXM 80GB and B200 (HGX), each with its
  source. NVIDIA's datasheets print tensor-core figures *with* 2:4 sparsity; the dense figure is
  half of it. Capacity is given twice: the datasheet's label ("80GB") and the bytes a process sees,
  `nvidia-smi`'s memory.total in MiB times 2^20 (the figures NVIDIA prints are neither exact GB
  nor exact GiB: an H100 "80GB" reports 81559 MiB = 85.52e9 B = 79.65 GiB).
- `LINKS`: per-GPU link classes with alpha (seconds per ring step) and beta (seconds per byte =
  1 / achievable bandwidth per direction). Line rate times an achievable fraction (NCCL's bus
  bandwidth stays below line rate: protocol overhead) gives the achievable bandwidth.
- Per-op-class efficiencies (fraction of the device's peak a class of kernels reaches): matmul,
  attention, memory-bound (fraction of HBM bandwidth). Each `Rate` says whether it is calibrated
  (measured by a profile) or assumed, and from what.
- `cpu_host`: this CPU machine. It has no datasheet: every number comes from a profile file.

Machine profile (`myriad.machine_profile/1`), JSON written by myriad's benchmarks (bench_gemm,
bench_attention, bench_collectives, bench_gemm_gpu and bench_attention_gpu); `load_profile` checks it:

    {
      "schema": "myriad.machine_profile/1",          # required, exactly this string
      "machine": "Intel Xeon (KVM), 2 vCPU",          # required, free text
      "date": "2026-12-03T10:00:00Z",                 # required, ISO 8601
      "command": "build/benchmarks/bench_gemm --profile out.json",   # required
      "peak_flops_per_s": 3.576e11,                   # required for cpu_host (its MFU denominator)
      "precision": "fp32",                            # optional: precision the compute rates ran at
      "ranks_per_node": 8,                            # optional: ranks sharing one node (cpu_host)
      "cores": 2,                                     # optional: CPU cores of the node (cpu_host time-sharing)
      "threads": 1,                                   # optional: threads each compute rate ran on (default 1)
      "compute": {                                    # required
        "matmul_flops_per_s": 3.0e11,                 # required: GEMM throughput at the model's shapes
        "attention_flops_per_s": 1.0e11,              # optional
        "memory_bytes_per_s": 2.0e10,                 # optional (required for cpu_host)
        "activation_bytes_per_s": 7.0e8,              # optional: the MLP activation (GELU/SwiGLU), bytes as
                                                      #   step_time counts them; default memory_bytes_per_s
        "optimizer_bytes_per_s": 1.0e10,              # optional: AdamW, bytes as step_time counts them;
                                                      #   default memory_bytes_per_s
        "matmul_flops_per_s_by_tp": {"2": 2.6e11, "8": 1.5e11},   # optional: one rank's GEMMs of a tp split
        "gemm_sizes": [{"m": 2048, "n": 768, "k": 768, "flops_per_s": 2.9e11}]   # optional, informative
      },
      "links": {                                      # optional; each entry optional
        "intra": {"alpha_s": 2.0e-6, "beta_s_per_byte": 1.0e-10, "measured_with": "bench_collectives ..."},
        "inter": {"alpha_s": 1.0e-5, "beta_s_per_byte": 2.1e-11, "measured_with": "..."},
        "intra_by_ranks": {                           # optional: the link as groups of G see it while N
          "8x2": {"alpha_s": 1.4e-5, "beta_s_per_byte": 9.0e-10, "ranks": 8, "group": 2,
                  "measured_with": "..."}             #   ranks share the node (bench_collectives --group-size)
        },
        "intra_in_step_by_ranks": {"8x2": {...}}      # optional: the same between compute, as a step meets
      }                                               #   it (bench_collectives --compute-gemms); preferred
    }

Merge rule (`hardware_from`): a profile's measured throughput *replaces* peak x assumed efficiency
for that op class (it is the rate, not a new peak); a profile's link replaces the datasheet link.
The MFU denominator stays the datasheet dense peak for GPUs; for cpu_host it is the profile's
`peak_flops_per_s`. A layout with tp > 1 runs its GEMMs at the `matmul_flops_per_s_by_tp` entry
nearest to its tp (log scale; `Hardware.matmul_flops_per_s(fmt, tp)`): a tp split makes the GEMMs
narrower, and narrow GEMMs may run below the whole ones' rate. Time-sharing (cpu_host with `cores`):
the compute rates are those of one rank on `threads` threads; when the ranks of a node ask for more
threads than it has cores, each rank gets `Hardware.rank_share(ranks)` = min(1, cores / (ranks *
threads)) of them, and step_time scales every compute rate by it. Links are measured, not scaled:
with `links.intra_by_ranks` the intra-node link of a group of G among N ranks on a node is the entry
measured nearest to (N, G) (`Hardware.intra_link`: nearest N first, then nearest G, each on a log
scale, ties to the larger), else `links.intra`. `links.intra_in_step_by_ranks` (each call after the
compute a step does between two collectives, the time the call adds to that loop) is preferred to
`links.intra_by_ranks` (calls back to back): ranks that time-share cores reach a collective at
different times, and the ranks that wait take CPU from those that compute. "Nearest" is `_nearest`:
on a log scale, ties to the larger (the slower) entry. Invariants: every rate > 0; every `Rate` and
`Link` names its source; no global state (the tables are constants, `Hardware` is a frozen value).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field

from .gemm import GEMM_MODELS, GemmModel

SCHEMA = "myriad.machine_profile/1"
MIB = 1 << 20


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator's datasheet figures (dense peaks, per device)."""
    name: str
    bf16_flops: float  # dense 16-bit (bf16 = fp16) tensor-core peak, FLOP/s
    tf32_flops: float  # dense TF32 tensor-core peak, FLOP/s (myriad selects no TF32 path; for reference)
    fp32_flops: float  # FP32 peak without tensor cores, FLOP/s
    hbm_label: str  # capacity as the datasheet prints it
    hbm_bytes: int  # bytes a process sees: nvidia-smi memory.total (MiB) * 2^20
    hbm_bytes_per_s: float  # HBM bandwidth, datasheet
    source: str
    notes: str = ""

    def peak_flops(self, fmt: str) -> float:
        """Dense peak FLOP/s of the units a computation in `fmt` runs on: bf16/fp16 on tensor cores,
        fp32 on the FP32 units (myriad's fp32 GEMMs and its f32 flash-attention kernels)."""
        fmt = fmt.lower()
        if fmt in ("bf16", "fp16"):
            return self.bf16_flops
        if fmt == "tf32":
            return self.tf32_flops
        if fmt == "fp32":
            return self.fp32_flops
        raise ValueError(f"unknown number format '{fmt}' (bf16, fp16, tf32 or fp32)")


# Datasheet sources. NVIDIA's tables mark tensor-core figures "* With sparsity"; dense = half.
_H100_SOURCE = ("NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column "
                "(https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet): "
                "BF16/FP16 1,979 TFLOPS* and TF32 989 TFLOPS* with sparsity, FP32 67 TFLOPS, 80GB, "
                "3.35TB/s, NVLink 900GB/s; table reproduced at archive-lib.hpctech.co.jp/gpuproduct/"
                "nvidia-h100.html; dense BF16 989 TFLOPS confirmed in stas00/ml-engineering "
                "compute/accelerator/README.md. memory.total 81559 MiB: nvidia-smi totals listed in "
                "modal-labs/modal-client PR #2797")
_H200_SOURCE = ("NVIDIA H200 product page (https://www.nvidia.com/en-us/data-center/h200/), H200 SXM column: "
                "BF16/FP16 1,979 TFLOPS* and TF32 989 TFLOPS* with sparsity, FP32 67 TFLOPS, 141GB "
                "HBM3e, 4.8TB/s, NVLink 900GB/s (dense table: meta-pytorch/tritonbench issue #78; "
                "stas00/ml-engineering). memory.total 143771 MiB: nvidia-smi output of 8x H200 quoted "
                "in a ModelCloud/GPTQModel issue (2026)")
_A100_SOURCE = ("NVIDIA A100 datasheet (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/"
                "pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf), A100 80GB SXM: BF16/FP16 312 "
                "TFLOPS (624 with sparsity), TF32 156 (312), FP32 19.5 TFLOPS, 80GB HBM2e, 2,039 GB/s, "
                "NVLink 600GB/s (via glennklockwood.com/garden/processors/A100 and thundercompute.com's "
                "A100 table). memory.total 81920 MiB: modal-labs/modal-client PR #2797")
_B200_SOURCE = ("NVIDIA HGX page (https://www.nvidia.com/en-us/data-center/hgx/), HGX B200 per-GPU column "
                "(reproduced at zdszero.github.io/Computer/Artificial_Intelligence/Hardware.html): "
                "FP16/BF16 4.5 PFLOPS and TF32 2.2 PFLOPS with sparsity, FP32 75 TFLOPS, 180GB HBM3E, "
                "7.7TB/s, NVLink 5 1.8TB/s. memory.total 183359 MiB: nvidia-smi output of 8x B200 in "
                "AWS's P6-B200 documentation")

DEVICES = {
    "h100": DeviceSpec(name="H100 SXM5 80GB", bf16_flops=1979e12 / 2, tf32_flops=989e12 / 2, fp32_flops=67e12,
                       hbm_label="80GB", hbm_bytes=81559 * MIB, hbm_bytes_per_s=3.35e12, source=_H100_SOURCE),
    "h200": DeviceSpec(name="H200 SXM 141GB", bf16_flops=1979e12 / 2, tf32_flops=989e12 / 2, fp32_flops=67e12,
                       hbm_label="141GB", hbm_bytes=143771 * MIB, hbm_bytes_per_s=4.8e12, source=_H200_SOURCE),
    "a100": DeviceSpec(name="A100 SXM4 80GB", bf16_flops=312e12, tf32_flops=156e12, fp32_flops=19.5e12,
                       hbm_label="80GB", hbm_bytes=81920 * MIB, hbm_bytes_per_s=2.039e12, source=_A100_SOURCE),
    "b200": DeviceSpec(name="B200 (HGX B200, 1000 W)", bf16_flops=4.5e15 / 2, tf32_flops=2.2e15 / 2,
                       fp32_flops=75e12, hbm_label="180GB", hbm_bytes=183359 * MIB, hbm_bytes_per_s=7.7e12,
                       source=_B200_SOURCE,
                       notes="other NVIDIA pages differ: DGX B200 lists 64 TB/s for 8 GPUs (8 TB/s each); "
                             "stas00/ml-engineering lists FP32 80 TFLOPS and TF32 1,125 dense"),
}

DEFAULT_INTRA = {"a100": "nvlink3", "h100": "nvlink4", "h200": "nvlink4", "b200": "nvlink5"}


@dataclass(frozen=True)
class Link:
    """A link class: alpha seconds per ring step, beta seconds per byte (per GPU, per direction)."""
    name: str
    alpha_s: float
    beta_s_per_byte: float
    line_bytes_per_s: float = 0.0  # line rate per direction (0: measured, no datasheet)
    achievable_fraction: float = 0.0  # achievable / line rate (0: measured)
    calibrated: bool = False
    source: str = ""

    @property
    def bytes_per_s(self) -> float:
        return 1.0 / self.beta_s_per_byte


def _link(name, line_bytes_per_s, fraction, alpha_s, source):
    return Link(name=name, alpha_s=alpha_s, beta_s_per_byte=1.0 / (line_bytes_per_s * fraction),
                line_bytes_per_s=line_bytes_per_s, achievable_fraction=fraction, calibrated=False, source=source)


# Alpha: NCCL's own tuning model (NVIDIA/nccl src/graph/tuning.cc, commit 01afd20a, `hwLat`), ring
# algorithm with the Simple protocol that large messages use: 3.4 us per step over NVLink, 9.6 us
# per step over the network. Its 8.4 us base latency per collective is not modelled.
_ALPHA_NVLINK = 3.4e-6
_ALPHA_NET = 9.6e-6
_ALPHA_PCI = 5.7e-6  # the same table's PCI row
_NCCL_LAT = "alpha: NCCL tuning.cc ring/Simple hwLat (NVLink 3.4 us, network 9.6 us per step)"
_NCCL_LAT_PCI = "alpha: NCCL tuning.cc ring/Simple hwLat, PCI row (5.7 us per step)"
# NVLink: NCCL reaches ~370 GB/s of the 450 GB/s NVLink4 line rate (~20 % protocol overhead;
# NCCL maintainer, NVIDIA/nccl-tests issue #212); on A800 (NVLink3 at 200 GB/s per direction)
# 160 GB/s (NVIDIA/nccl issue #412). NVLink5 is assumed to keep NVLink4's fraction.
_NVLINK4_FRACTION = 370.0 / 450.0
# InfiniBand: "CX-7 NICs at NDR rate (400Gbps) should achieve up to 48-49GB/s per NIC"
# (NVIDIA/nccl-tests issue #267); HDR 200G: 24 GB/s (NVIDIA/nccl issue #412). 800G and RoCE are
# assumed to keep that fraction.
_IB_FRACTION = 48.0 / 50.0

LINKS = {
    "nvlink3": _link("nvlink3", 300e9, 160.0 / 200.0, _ALPHA_NVLINK,
                     "A100 NVLink3 600 GB/s bidirectional = 300 GB/s per direction (A100 datasheet); fraction "
                     "0.80 = 160/200 GB/s measured on A800 NVLink3 (NVIDIA/nccl #412); " + _NCCL_LAT),
    "nvlink4": _link("nvlink4", 450e9, _NVLINK4_FRACTION, _ALPHA_NVLINK,
                     "H100/H200 NVLink4 900 GB/s bidirectional = 450 GB/s per direction (datasheets); "
                     "achievable 370 GB/s bus bandwidth (NVIDIA/nccl-tests #212); " + _NCCL_LAT),
    "nvlink5": _link("nvlink5", 900e9, _NVLINK4_FRACTION, _ALPHA_NVLINK,
                     "B200 NVLink5 1.8 TB/s bidirectional = 900 GB/s per direction (HGX page); fraction "
                     "370/450 ASSUMED equal to NVLink4's; " + _NCCL_LAT),
    "ib400": _link("ib400", 50e9, _IB_FRACTION, _ALPHA_NET,
                   "one 400 Gb/s NDR NIC per GPU = 50 GB/s per direction; achievable 48 GB/s "
                   "(NVIDIA/nccl-tests #267); " + _NCCL_LAT),
    # PCIe servers (no NVLink): GPU-to-GPU traffic crosses the PCIe switches and CPU root complexes.
    "pcie4": _link("pcie4", 31.5e9, 25.0 / 31.5, _ALPHA_PCI,
                   "PCIe 4.0 x16 = 16 GT/s x 16 lanes x 128/130 = 31.5 GB/s per direction; achievable 25 GB/s: "
                   "A100 PCIe Gen4 x16 measured peak in the BaM paper (ZaidQureshi/bam issue #54); " + _NCCL_LAT_PCI),
    "pcie5": _link("pcie5", 63.0e9, 28.0 / 63.0, _ALPHA_PCI,
                   "PCIe 5.0 x16 = 63 GB/s per direction; achievable 28 GB/s: all-reduce bus bandwidth of 8 GPUs "
                   "on PCIe Gen5 (8x RTX 5090, 1-8 GB messages; 35 GB/s with 4), NVIDIA/nccl issue #1639, where "
                   "the maintainer notes the CPU and memory bound it; " + _NCCL_LAT_PCI),
    "ib200": _link("ib200", 25e9, 24.0 / 25.0, _ALPHA_NET,
                   "one 200 Gb/s HDR InfiniBand NIC per GPU (DGX A100: 8 per node) = 25 GB/s per direction; "
                   "achievable 24 GB/s (NVIDIA/nccl #412); " + _NCCL_LAT),
    "opa4x100": _link("opa4x100", 4 * 12.5e9 / 8, _IB_FRACTION, _ALPHA_NET,
                      "4 x 100 Gb/s Omni-Path links per 8-GPU node (BLOOM's Jean Zay nodes, bigscience tr11 README) "
                      "= 6.25 GB/s per GPU per direction; fraction 0.96 ASSUMED (InfiniBand's); " + _NCCL_LAT),
    "ib800": _link("ib800", 100e9, _IB_FRACTION, _ALPHA_NET,
                   "one 800 Gb/s XDR NIC per GPU = 100 GB/s per direction; fraction 0.96 ASSUMED equal to "
                   "NDR's; " + _NCCL_LAT),
    "roce200": _link("roce200", 25e9, _IB_FRACTION, _ALPHA_NET,
                     "one 200 Gb/s RoCE NIC per GPU = 25 GB/s per direction; fraction 0.96 ASSUMED (24 GB/s "
                     "is the HDR InfiniBand figure of NVIDIA/nccl #412); " + _NCCL_LAT),
}


@dataclass(frozen=True)
class Rate:
    """What one op class achieves: a measured rate, or a fraction of the device's peak."""
    efficiency: float = 0.0  # fraction of peak (FLOP/s) or of HBM bandwidth (memory class)
    measured: float = 0.0  # measured FLOP/s or bytes/s; > 0 replaces peak * efficiency
    calibrated: bool = False
    source: str = ""

    def of(self, peak: float) -> float:
        return self.measured if self.measured > 0 else peak * self.efficiency


# Matmul: best-shape BF16 "maximum achievable matmul FLOPS" (stas00/ml-engineering,
# compute/accelerator/README.md, MAMF v2 table): H100 SXM 794.5 of 989 TFLOPS (80.3 %), A100 SXM
# 271.2 of 312 (86.9 %). A best shape: the model's own GEMMs may do worse.
_MATMUL = {
    "h100": Rate(efficiency=794.5 / 989.0, source="MAMF 794.5/989 TFLOPS, stas00/ml-engineering (best shape)"),
    "a100": Rate(efficiency=271.2 / 312.0, source="MAMF 271.2/312 TFLOPS, stas00/ml-engineering (best shape)"),
    "h200": Rate(efficiency=794.5 / 989.0, source="ASSUMED equal to H100's MAMF fraction (same GH100 die, 700 W)"),
    "b200": Rate(efficiency=794.5 / 989.0, source="ASSUMED equal to H100's MAMF fraction (no B200 measurement found)"),
}
_ATTENTION = Rate(efficiency=0.5, source="ASSUMED 0.5 of the peak of the format attention runs in (myriad's kernels "
                                         "unmeasured; FlashAttention-2, arXiv 2307.08691, reports 50-73 % of A100 "
                                         "peak, FlashAttention-1 25-40 %)")
_MEMORY = Rate(efficiency=0.8, source="ASSUMED 0.8 of datasheet HBM bandwidth (unmeasured)")


@dataclass(frozen=True)
class Hardware:
    """A node type: device, GPUs per node, links, and the rate of each op class."""
    name: str  # h100 | h200 | a100 | b200 | cpu_host
    device: DeviceSpec | None  # None: cpu_host (no datasheet)
    gpus_per_node: int
    intra: Link
    inter: Link | None  # None: one node only (a group that crosses nodes is an error)
    matmul: Rate
    attention: Rate
    memory: Rate
    activation: Rate | None = None  # the MLP activation's bytes (None: the memory rate)
    optimizer: Rate | None = None  # the optimizer's bytes (None: the memory rate)
    matmul_by_tp: tuple = ()  # ((tp, Rate), ...): one rank's GEMMs of a tp split, measured
    intra_by_ranks: tuple = ()  # ((ranks on the node, group size, Link), ...) measured while ranks share a node
    intra_in_step_by_ranks: tuple = ()  # the same, each call after a step's compute (preferred)
    peak_measured: float = 0.0  # cpu_host: the profile's peak_flops_per_s (MFU denominator)
    cores: int = 0  # cpu_host: cores of a node (0: a device per rank, no time-sharing)
    threads_per_rank: int = 1  # cpu_host: threads the profile's rates ran on
    profile: dict = field(default_factory=dict)  # the merged profile's header (machine, date, command, path)
    gemm_model: GemmModel | None = None  # shape-dependent kernel times (gemm.py); None: flat rates

    def peak_flops(self, fmt: str) -> float:
        """The dense peak used for MFU and as the base of assumed efficiencies."""
        if self.device is None:
            return self.peak_measured
        return self.device.peak_flops(fmt)

    def rank_share(self, ranks_on_node: int) -> float:
        """Share of its rates a rank keeps when `ranks_on_node` ranks time-share the node's cores."""
        if self.cores <= 0:
            return 1.0
        return min(1.0, self.cores / (max(1, ranks_on_node) * self.threads_per_rank))

    def intra_link(self, ranks_on_node: int, group: int) -> Link:
        """The intra-node link a group of `group` ranks sees while `ranks_on_node` ranks share the node:
        the `intra_in_step_by_ranks` (else `intra_by_ranks`) entry nearest in ranks, then in group size
        (log scale, ties to the larger, the slower), else `intra`."""
        entries = self.intra_in_step_by_ranks or self.intra_by_ranks
        if not entries:
            return self.intra
        ranks = _nearest({e[0] for e in entries}, ranks_on_node)
        size = _nearest({e[1] for e in entries if e[0] == ranks}, group)
        return next(link for r, g, link in entries if (r, g) == (ranks, size))

    def matmul_flops_per_s(self, fmt: str, tp: int = 1) -> float:
        """The GEMM rate; with tp > 1 the measured rate of the nearest tp split where the profile has one."""
        if tp > 1 and self.matmul_by_tp:
            rates = dict(self.matmul_by_tp)
            return rates[_nearest(rates, tp)].of(self.peak_flops(fmt))
        return self.matmul.of(self.peak_flops(fmt))

    def attention_flops_per_s(self, fmt: str) -> float:
        return self.attention.of(self.peak_flops(fmt))

    def memory_bytes_per_s(self) -> float:
        return self.memory.of(self.device.hbm_bytes_per_s if self.device is not None else 0.0)

    def activation_bytes_per_s(self) -> float:
        return self.activation.measured if self.activation is not None else self.memory_bytes_per_s()

    def optimizer_bytes_per_s(self) -> float:
        return self.optimizer.measured if self.optimizer is not None else self.memory_bytes_per_s()

    def calibration(self) -> dict:
        """Which numbers are calibrated (measured by the profile) and which assumed, with sources."""
        out = {}
        if self.gemm_model is not None and not self.matmul.calibrated:
            out["kernels"] = ("16-bit GEMM and flash-attention times from their shapes (gemm.py): "
                              + self.gemm_model.source)
        for key in ("matmul", "attention", "memory", "activation", "optimizer"):
            rate = getattr(self, key)
            if rate is None:
                continue
            out[key] = ("calibrated" if rate.calibrated else "uncalibrated") + ": " + rate.source
        for tp, rate in self.matmul_by_tp:
            out[f"matmul tp {tp}"] = "calibrated: " + rate.source
        out["intra"] = ("calibrated" if self.intra.calibrated else "datasheet") + ": " + self.intra.source
        for ranks, group, link in self.intra_by_ranks:
            out[f"intra {ranks}x{group}"] = "calibrated: " + link.source
        for ranks, group, link in self.intra_in_step_by_ranks:
            out[f"intra in step {ranks}x{group}"] = "calibrated: " + link.source
        if self.inter is not None:
            out["inter"] = ("calibrated" if self.inter.calibrated else "datasheet") + ": " + self.inter.source
        return out


def _nearest(measured, wanted: int) -> int:
    """The measured size (ranks, group, tp degree) nearest to `wanted` on a log scale; a tie goes to
    the larger, the slower one."""
    return min(measured, key=lambda m: (abs(math.log(m / max(1, wanted))), -m))


def _fail(path, message):
    raise ValueError(f"machine profile {path}: {message}")


def _number(value, key, path, positive=True):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(path, f"'{key}' must be a number, got {value!r}")
    if positive and not value > 0:
        _fail(path, f"'{key}' must be > 0, got {value!r}")
    return float(value)


def load_profile(path) -> dict:
    """Reads and checks a `myriad.machine_profile/1` file (or takes an already-parsed dict, whose
    error messages then name '<dict>'). Returns the profile with numbers as floats; a ValueError
    names the file and the key that is missing or wrong."""
    if isinstance(path, dict):
        data, where = path, "<dict>"
    else:
        where = os.fspath(path)
        try:
            with open(where, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            _fail(where, f"not JSON ({e})")
    if not isinstance(data, dict):
        _fail(where, "the top level must be an object")
    for key in ("schema", "machine", "date", "command", "compute"):
        if key not in data:
            _fail(where, f"missing key '{key}'")
    if data["schema"] != SCHEMA:
        _fail(where, f"'schema' is {data['schema']!r}, expected '{SCHEMA}'")
    for key in ("machine", "date", "command"):
        if not isinstance(data[key], str) or not data[key]:
            _fail(where, f"'{key}' must be a non-empty string")
    out = dict(data)
    out["path"] = where
    if "peak_flops_per_s" in data:
        out["peak_flops_per_s"] = _number(data["peak_flops_per_s"], "peak_flops_per_s", where)
    for key in ("ranks_per_node", "cores", "threads"):
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                _fail(where, f"'{key}' must be a whole number >= 1, got {value!r}")
    if "precision" in data and data["precision"] not in ("fp32", "bf16", "fp16", "tf32"):
        _fail(where, f"'precision' must be fp32, bf16, fp16 or tf32, got {data['precision']!r}")
    compute = data["compute"]
    if not isinstance(compute, dict):
        _fail(where, "'compute' must be an object")
    if "matmul_flops_per_s" not in compute:
        _fail(where, "missing key 'compute.matmul_flops_per_s'")
    out["compute"] = dict(compute)
    for key in ("matmul_flops_per_s", "attention_flops_per_s", "memory_bytes_per_s", "activation_bytes_per_s",
                "optimizer_bytes_per_s"):
        if key in compute:
            out["compute"][key] = _number(compute[key], f"compute.{key}", where)
    if "matmul_flops_per_s_by_tp" in compute:
        by_tp = compute["matmul_flops_per_s_by_tp"]
        if not isinstance(by_tp, dict):
            _fail(where, "'compute.matmul_flops_per_s_by_tp' must be an object {\"tp\": FLOP/s}")
        checked = {}
        for key, value in by_tp.items():
            if not key.isdigit() or int(key) < 2:
                _fail(where, f"'compute.matmul_flops_per_s_by_tp' key {key!r} must be a tp degree >= 2")
            checked[key] = _number(value, f"compute.matmul_flops_per_s_by_tp.{key}", where)
        out["compute"]["matmul_flops_per_s_by_tp"] = checked
    if "gemm_sizes" in compute and not isinstance(compute["gemm_sizes"], list):
        _fail(where, "'compute.gemm_sizes' must be a list")
    links = data.get("links", {})
    if not isinstance(links, dict):
        _fail(where, "'links' must be an object")
    out["links"] = {}
    for name, link in links.items():
        if name in ("intra_by_ranks", "intra_in_step_by_ranks"):
            if not isinstance(link, dict):
                _fail(where, f"'links.{name}' must be an object")
            out["links"][name] = {key: _link_entry(entry, f"links.{name}.{key}", where, shared=True)
                                  for key, entry in link.items()}
        elif name in ("intra", "inter"):
            out["links"][name] = _link_entry(link, f"links.{name}", where)
        else:
            _fail(where, f"unknown link 'links.{name}' (intra, inter, intra_by_ranks or intra_in_step_by_ranks)")
    return out


def _link_entry(link, key, where, shared=False) -> dict:
    """One measured link of a profile; `shared` (an intra_by_ranks entry) also needs ranks and group."""
    if not isinstance(link, dict):
        _fail(where, f"'{key}' must be an object")
    needed = ("alpha_s", "beta_s_per_byte", "measured_with") + (("ranks", "group") if shared else ())
    for name in needed:
        if name not in link:
            _fail(where, f"missing key '{key}.{name}'")
    out = {
        "alpha_s": _number(link["alpha_s"], f"{key}.alpha_s", where, positive=False),
        "beta_s_per_byte": _number(link["beta_s_per_byte"], f"{key}.beta_s_per_byte", where),
        "measured_with": str(link["measured_with"]),
    }
    if out["alpha_s"] < 0:
        _fail(where, f"'{key}.alpha_s' must be >= 0")
    if shared:
        for name in ("ranks", "group"):
            value = link[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                _fail(where, f"'{key}.{name}' must be a whole number >= 1, got {value!r}")
            out[name] = value
        if out["ranks"] % out["group"] != 0:
            _fail(where, f"'{key}': group {out['group']} does not divide ranks {out['ranks']}")
    return out


def _measured_link(name, entry, profile):
    return Link(name=f"{name} (measured)", alpha_s=entry["alpha_s"], beta_s_per_byte=entry["beta_s_per_byte"],
                calibrated=True, source=f"profile {profile['path']} ({profile['date']}): {entry['measured_with']}")


def _shared_links(links, profile) -> dict:
    """Hardware's intra_by_ranks and intra_in_step_by_ranks from the profile's links of those names:
    ((ranks, group, Link), ...), sorted."""
    return {key: tuple(sorted((e["ranks"], e["group"], _measured_link(f"intra {e['ranks']}x{e['group']}", e, profile))
                              for e in links.get(key, {}).values()))
            for key in ("intra_by_ranks", "intra_in_step_by_ranks")}


def _measured_rate(value, what, profile):
    return Rate(measured=value, calibrated=True,
                source=f"{what} measured: profile {profile['path']} ({profile['machine']}, {profile['date']}, "
                       f"`{profile['command']}`)")


def _extra_rates(compute, profile) -> dict:
    """The optional per-op rates: the MLP activation and the optimizer (bytes as step_time counts them),
    and the GEMMs of tp splits."""
    out = {}
    by_tp = compute.get("matmul_flops_per_s_by_tp", {})
    if by_tp:
        out["matmul_by_tp"] = tuple(sorted((int(tp), _measured_rate(rate, f"matmul of a tp {tp} split", profile))
                                           for tp, rate in by_tp.items()))
    for key, field_name in (("activation_bytes_per_s", "activation"), ("optimizer_bytes_per_s", "optimizer")):
        if key in compute:
            out[field_name] = _measured_rate(compute[key], field_name, profile)
    return out


def hardware_from(gpu: str = "h100", gpus_per_node: int = 0, intra: str = "", inter: str = "ib400",
                  profile=None) -> Hardware:
    """Hardware for `gpu` (h100 | h200 | a100 | b200 | cpu_host) with `gpus_per_node` (0: 8 for GPUs;
    for cpu_host the profile's ranks_per_node, else one node holds every rank), link classes `intra`
    ("" = the GPU's NVLink generation) and `inter` ("" or "none": a single node), and an optional
    profile (path or dict, see the module docstring) whose measured rates and links replace the
    datasheet-derived ones. cpu_host needs a profile with peak_flops_per_s, compute.matmul_flops_per_s
    and compute.memory_bytes_per_s (and links.intra for more than one rank); its `cores` and `threads`
    set the time-sharing of a node's cores (Hardware.rank_share)."""
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 0:
        raise ValueError(f"gpus_per_node must be an integer >= 1 (0 = the default), got {gpus_per_node!r}")
    gpu = gpu.lower()
    prof = load_profile(profile) if profile is not None else None
    header = {k: prof[k] for k in ("path", "machine", "date", "command", "precision") if k in prof} if prof else {}
    if gpu == "cpu_host":
        if prof is None:
            raise ValueError("cpu_host has no datasheet: pass a machine profile (myriad.machine_profile/1) "
                             "written by bench_gemm / bench_attention / bench_collectives")
        for key, present in (("peak_flops_per_s", "peak_flops_per_s" in prof),
                             ("compute.memory_bytes_per_s", "memory_bytes_per_s" in prof["compute"])):
            if not present:
                _fail(prof["path"], f"cpu_host needs '{key}'")
        compute = prof["compute"]
        matmul = _measured_rate(compute["matmul_flops_per_s"], "matmul", prof)
        if "attention_flops_per_s" in compute:
            attention = _measured_rate(compute["attention_flops_per_s"], "attention", prof)
        else:
            attention = dataclasses.replace(matmul, calibrated=False,
                                            source="ASSUMED equal to the measured matmul rate (no "
                                                   "compute.attention_flops_per_s in the profile)")
        memory = _measured_rate(compute["memory_bytes_per_s"], "memory bandwidth", prof)
        extra = _extra_rates(compute, prof)
        links = prof["links"]
        shared = _shared_links(links, prof)
        if "intra" in links:
            intra_link = _measured_link("intra", links["intra"], prof)
        elif shared["intra_by_ranks"]:
            intra_link = shared["intra_by_ranks"][0][2]  # the fewest ranks measured
        else:
            intra_link = Link(name="intra (none measured)", alpha_s=0.0, beta_s_per_byte=float("inf"),
                              source=f"profile {prof['path']} has no links.intra: multi-rank layouts cannot be timed")
        inter_link = _measured_link("inter", links["inter"], prof) if "inter" in links else None
        per_node = gpus_per_node or int(prof.get("ranks_per_node", 1 << 30))
        return Hardware(name="cpu_host", device=None, gpus_per_node=per_node, intra=intra_link, inter=inter_link,
                        matmul=matmul, attention=attention, memory=memory, peak_measured=prof["peak_flops_per_s"],
                        cores=int(prof.get("cores", 0)), threads_per_rank=int(prof.get("threads", 1)),
                        profile=header, **shared, **extra)
    if gpu not in DEVICES:
        raise ValueError(f"unknown gpu '{gpu}' (one of {', '.join(list(DEVICES) + ['cpu_host'])})")
    intra = intra or DEFAULT_INTRA[gpu]
    for name in (intra,) + (() if inter in ("", "none") else (inter,)):
        if name not in LINKS:
            raise ValueError(f"unknown link class '{name}' (one of {', '.join(LINKS)})")
    hw = Hardware(name=gpu, device=DEVICES[gpu], gpus_per_node=gpus_per_node or 8, intra=LINKS[intra],
                  inter=None if inter in ("", "none") else LINKS[inter], matmul=_MATMUL[gpu], attention=_ATTENTION,
                  memory=_MEMORY, profile=header, gemm_model=GEMM_MODELS.get(gpu))
    if prof is None:
        return hw
    compute, links = prof["compute"], prof["links"]
    changes = {"matmul": _measured_rate(compute["matmul_flops_per_s"], "matmul", prof)}
    if "attention_flops_per_s" in compute:
        changes["attention"] = _measured_rate(compute["attention_flops_per_s"], "attention", prof)
    if "memory_bytes_per_s" in compute:
        changes["memory"] = _measured_rate(compute["memory_bytes_per_s"], "memory bandwidth", prof)
    changes.update(_extra_rates(compute, prof))
    if "intra" in links:
        changes["intra"] = _measured_link("intra", links["intra"], prof)
    changes.update(_shared_links(links, prof))
    if "inter" in links:
        changes["inter"] = _measured_link("inter", links["inter"], prof)
    return dataclasses.replace(hw, **changes)
