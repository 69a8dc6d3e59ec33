"""Kernel times from their shapes: a GEMM's time from (m, n, k, batch), attention's from (T, D, heads).

A GEMM C[m x n] = A[m x k] B[k x n] (times `batch` independent ones) runs as thread-block tiles of
tm x tn outputs, at most one per SM at a time at full speed. Its time is the least, over the tile
shapes and split-K factors a library picks from (cuBLAS / CUTLASS heuristics), of

    waves x (time of one tile) + split-K reduction,   waves = ceil(tiles / SMs)
    time of one tile = 2 tm tn (k_padded + k_fill) / (per-SM rate x tile efficiency)

where the per-SM rate is the device's dense peak x the best-shape efficiency measured for it
(`GemmModel.best`) / SMs; k is padded to the tile's k step; `k_fill` is the pipeline's fill and
drain per tile (the tiles' loads before the first MMA and the epilogue's stores, in k units); a tile
smaller than the largest feeds its tensor cores from L2 with less reuse, and its efficiency is the
L2 roofline min(1, L2 bytes/s x intensity / per-device rate), intensity = tm tn / ((tm + tn) x
element bytes). The GEMM also moves at least its operands and result through HBM: time >= bytes /
(HBM bandwidth x achievable fraction). Every launch adds `launch_s` (the gap between two dependent
kernels on one stream). This is tile and wave quantisation (NVIDIA's "Matrix Multiplication
Background" guide): thin tensor-parallel shards and small hidden sizes fill fewer SMs and tiles and
run far below the best shape, and a micro-batch's tokens change m.

Attention kernels:
- flash (FlashAttention-2-like fused kernels on tensor cores): one tile per (sequence, head, 128
  queries), each streaming the keys it sees plus a fill (`flash_fill`); the same wave rule, at the
  forward+backward efficiency measured for its head width (`GemmModel.flash_best`) for both passes
  (the backward does 2.5 x the forward's FLOPs).
- materialized (Megatron-LM's unfused path: scores in HBM): two batched GEMMs forward (Q K^T: T x T
  x D; P V: T x D x T) and four backward, timed as GEMMs, plus the softmax / mask / dropout passes
  over the B x H x T x T scores in HBM (bytes given by the caller).

Every constant of `GemmModel` comes from a datasheet, a measurement or a stated assumption; the
sources are in `source` and docs/planning.md. No global state: the tables are constants and the
kernel times are pure functions of their arguments, memoised (a layout search asks for the same
shapes many times).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

SPLIT_K = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class GemmModel:
    """One device's GEMM and attention-kernel timing constants."""
    sms: int  # streaming multiprocessors
    tiles: tuple  # ((tm, tn), ...) thread-block output tiles the library picks from
    k_step: int  # k per main-loop iteration (16-bit operands)
    k_fill: int  # pipeline fill + epilogue per tile, in k units
    best: float  # best-shape efficiency (fraction of the dense peak) of the device's 16-bit GEMMs
    l2_bytes_per_s: float  # L2 bandwidth feeding the SMs
    hbm_fraction: float  # achievable share of HBM bandwidth for streaming kernels
    launch_s: float  # per kernel launch on a busy stream
    flash_best: tuple  # ((head_dim, flash forward+backward efficiency at long sequences), ...)
    flash_fill: int  # per query tile, in visible keys: loading Q, rescaling, writing O, the causal diagonal
    overlap_slowdown: float  # compute slowdown while a collective runs beside it (share of the hidden time)
    source: str

    def tile_efficiency(self, tm: int, tn: int, rate: float, elem_bytes: float) -> float:
        """Share of the per-SM rate a tm x tn tile sustains when the L2 must feed every SM."""
        intensity = 2.0 * tm * tn / ((tm + tn) * elem_bytes)  # FLOPs per L2 byte: 2 tm tn per (tm + tn) elements
        return min(1.0, self.l2_bytes_per_s * intensity / rate)


@functools.lru_cache(maxsize=65536)
def gemm_seconds(g: GemmModel, m: float, n: float, k: float, peak: float, hbm_bytes_per_s: float,
                 batch: float = 1.0, elem_bytes: float = 2.0) -> float:
    """Seconds of `batch` GEMMs of m x n x k on a device with dense peak `peak` (FLOP/s of the format)."""
    m, n, k, batch = max(1, math.ceil(m)), max(1, math.ceil(n)), max(1, math.ceil(k)), max(1, math.ceil(batch))
    rate = peak * g.best  # the device's best-shape rate
    per_sm = rate / g.sms
    best = math.inf
    for tm, tn in g.tiles:
        tile_rate = per_sm * g.tile_efficiency(tm, tn, rate, elem_bytes)
        tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
        for split in SPLIT_K:
            if split > 1 and (tiles * split > 2 * g.sms or k / split < 4 * g.k_step):
                break
            k_part = math.ceil(k / split / g.k_step) * g.k_step
            waves = math.ceil(tiles * split / g.sms)
            t = waves * 2.0 * tm * tn * (k_part + g.k_fill) / tile_rate
            if split > 1:  # partial f32 results written and summed: a pass over split x m x n x 4 bytes
                t += 2.0 * split * batch * m * n * 4.0 / (hbm_bytes_per_s * g.hbm_fraction)
            best = min(best, t)
    moved = batch * (m * k + k * n + m * n) * elem_bytes / (hbm_bytes_per_s * g.hbm_fraction)
    return max(best, moved) + g.launch_s


def flash_efficiency(g: GemmModel, head_dim: int) -> float:
    """Flash forward+backward efficiency for a head width: the measured entry nearest below (or the smallest)."""
    known = sorted(g.flash_best)
    eff = known[0][1]
    for d, e in known:
        if d <= head_dim:
            eff = e
    return eff


@functools.lru_cache(maxsize=4096)
def flash_seconds(g: GemmModel, sequences: float, heads: float, seq_len: int, head_dim: int, keys_per_query: float,
                  peak: float, backward: bool = False) -> float:
    """One flash attention pass (forward, or backward) over `sequences` x `heads` of seq_len queries
    seeing keys_per_query keys each on average: tiles of 128 queries, one per SM at a time."""
    q_tiles = max(1, math.ceil(sequences * heads)) * math.ceil(seq_len / 128)
    waves = math.ceil(q_tiles / g.sms)
    rate = peak * flash_efficiency(g, head_dim) / g.sms  # per SM
    # A tile's work: its 128 queries against its visible keys (the causal mean), scores and values (4 D per key),
    # plus the fill; waves of equal tiles (the causal tiles' unequal lengths average out when tiles > SMs).
    per_tile = 4.0 * 128 * head_dim * (keys_per_query + g.flash_fill) / rate
    if backward:
        per_tile *= 2.5  # 5 products to the forward's 2
    return waves * per_tile + g.launch_s


# Tiles: NVIDIA's "Matrix Multiplication Background" guide, section "Typical Tile Dimensions in
# cuBLAS": 256x128 and 128x256 most efficient, then 128x128, 256x64 / 64x256, 128x64 / 64x128, 64x64.
_TILES = ((256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64), (64, 128), (64, 64))
_A100_SOURCE = (
    "SMs 108 (torch multi_processor_count, stas00/ml-engineering training/performance); tiles: NVIDIA "
    "Matrix Multiplication Background guide 2.3; k step 32 and 3 stages (fill 2 x 32): CUTLASS sm80 "
    "kernel cutlass_tensorop_h16816gemm_256x128_32x3; best 271.2/312 (MAMF, stas00/ml-engineering); L2 "
    "5120 B/clk x 1.41 GHz (A100 whitepaper); HBM 0.85 = 1737/2039 GB/s copy (RRZE-HPC/gpu-benches "
    "gpu-stream a100_80); launch 3 us (2.6-4.4 us per back-to-back kernel, RRZE-HPC/gpu-benches "
    "gpu-small-kernels a100_80); flash: FlashAttention-2 causal forward+backward on A100 80GB "
    "(Dao-AILab/flash-attention assets/flash2_a100_fwd_bwd_benchmark.png): head dim 64 140/171, head "
    "dim 128 155/189 TFLOP/s at T 2048/16k -> asymptote 0.563 / 0.622 of 312 and a fill of 230 keys "
    "(both head dims: 0.82 of the 16k rate at T 2048, 0.52 at T 512); overlap slowdown 0.189: compute "
    "beside communication runs 18.9 % slower on average on 4x A100 / H100 (arXiv 2507.03114, abstract)")
_H100_SOURCE = (
    "SMs 132 (torch multi_processor_count, stas00/ml-engineering); tiles as A100 (cuBLAS traces show "
    "128x128x64); k step 64, fill 2 x 64 ASSUMED (no stage count found); best 794.5/989 (MAMF); L2 "
    "ASSUMED 5120 B/clk (A100's per clock; no whitepaper figure) x 1.98 GHz; HBM 0.85 ASSUMED "
    "(A100's; no H100 SXM STREAM figure found); launch 2.5 us (H200, RRZE-HPC/gpu-benches); flash: "
    "FlashAttention-2 causal forward+backward on H100 80GB SXM5 (Dao-AILab/flash-attention "
    "assets/flash2_h100_fwd_bwd_benchmark.png): head dim 64 232/284, head dim 128 265/328 TFLOP/s at "
    "T 2048/16k -> asymptote 0.295 / 0.341 of 989, fill 240 keys (cuDNN / FlashAttention-3 kernels "
    "are faster; not measured backward); overlap slowdown 0.189 (arXiv 2507.03114)")

GEMM_MODELS = {
    "a100": GemmModel(sms=108, tiles=_TILES, k_step=32, k_fill=64, best=271.2 / 312.0,
                      l2_bytes_per_s=5120 * 1.41e9, hbm_fraction=0.85, launch_s=3e-6,
                      flash_best=((64, 0.563), (128, 0.622)), flash_fill=230, overlap_slowdown=0.189,
                      source=_A100_SOURCE),
    "h100": GemmModel(sms=132, tiles=_TILES, k_step=64, k_fill=128, best=794.5 / 989.0,
                      l2_bytes_per_s=5120 * 1.98e9, hbm_fraction=0.85, launch_s=2.5e-6,
                      flash_best=((64, 0.295), (128, 0.341)), flash_fill=240, overlap_slowdown=0.189,
                      source=_H100_SOURCE),
}
GEMM_MODELS["h200"] = GEMM_MODELS["h100"]  # the same GH100 die and clocks (its HBM is the device's own)
