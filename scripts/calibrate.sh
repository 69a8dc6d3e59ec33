#!/usr/bin/env bash
# calibrate.sh — measure this machine's profile for the planner (myriad.machine_profile/1, see
# python/myriad/planner/hardware.py): bench_gemm, bench_attention and bench_collectives each merge
# their keys into one JSON file. Builds nothing: run scripts/build.sh (or cmake --build build) first.
#
# Usage: scripts/calibrate.sh [PROFILE]   (default build/machine_profile.json)
# Environment: BUILD (default build), CALIBRATE_THREADS (default 1: the OpenMP threads of one rank,
# as bench_scaling and the mpirun'd trainer run them; the planner time-shares the profile's `cores`
# between ranks x threads), CALIBRATE_EMBD / CALIBRATE_TOKENS / CALIBRATE_VOCAB (the GEMM shapes:
# default bench_scaling's model, C 256, micro-batch 2 x 128 tokens, V 512), CALIBRATE_BATCH /
# CALIBRATE_SEQ / CALIBRATE_HEADS / CALIBRATE_HEAD_DIM (the attention shape: default bench_scaling's,
# micro-batch 2, T 128, 8 heads of 32), CALIBRATE_LINKS (the
# "RANKSxGROUP" all-reduce runs of bench_collectives, default "2x2 4x2 4x4 8x2 8x4 8x8": the layouts
# bench_scaling runs on one node).
# About 1 min 45 s on 2 cores (2-vCPU AMD EPYC VM, 2026-12-03), most of it the 12 bench_collectives runs.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PROFILE=${1:-$BUILD/machine_profile.json}
THREADS=${CALIBRATE_THREADS:-1}
for b in bench_gemm bench_attention bench_collectives; do
  [[ -x $BUILD/benchmarks/$b ]] || { echo "calibrate.sh: $BUILD/benchmarks/$b missing (build first)" >&2; exit 1; }
done
mkdir -p "$(dirname "$PROFILE")"
export OMP_NUM_THREADS=$THREADS
echo "== bench_gemm (OMP_NUM_THREADS=$THREADS)"
"$BUILD/benchmarks/bench_gemm" --quick --tokens "${CALIBRATE_TOKENS:-256}" --embd "${CALIBRATE_EMBD:-256}" \
  --vocab "${CALIBRATE_VOCAB:-512}" --profile "$PROFILE"
echo "== bench_attention (OMP_NUM_THREADS=$THREADS)"
"$BUILD/benchmarks/bench_attention" --min-t "${CALIBRATE_SEQ:-128}" --max-t "${CALIBRATE_SEQ:-128}" \
  --batch "${CALIBRATE_BATCH:-2}" --heads "${CALIBRATE_HEADS:-8}" --head-dim "${CALIBRATE_HEAD_DIM:-32}" --profile "$PROFILE"
# The link among ranks that share the node: every group size G that divides N, all N/G groups at
# once (links.intra_by_ranks."NxG"; the planner picks the entry of a layout's ranks and group).
for ranks_and_group in ${CALIBRATE_LINKS:-2x2 4x2 4x4 8x2 8x4 8x8}; do
  ranks=${ranks_and_group%x*} group=${ranks_and_group#*x}
  echo "== bench_collectives ($ranks ranks in groups of $group, 1 thread each)"
  mpirun --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 -x OMP_NUM_THREADS=1 -np "$ranks" \
    "$BUILD/benchmarks/bench_collectives" --op all_reduce --min-bytes 1K --max-bytes 32M --factor 4 \
    --iters 20 --warmup 3 --group-size "$group" --profile "$PROFILE"
  # The same as a training step meets it: each call after CALIBRATE_STEP_GEMMS (default 20) GEMMs of
  # 128^3, about 1 ms of one core here, the compute bench_scaling's tp layouts do between two of
  # their collectives (links.intra_in_step_by_ranks, which the planner prefers).
  echo "== bench_collectives ($ranks ranks in groups of $group, each call after ${CALIBRATE_STEP_GEMMS:-20} GEMMs)"
  mpirun --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 -x OMP_NUM_THREADS=1 -np "$ranks" \
    "$BUILD/benchmarks/bench_collectives" --op all_reduce --min-bytes 1K --max-bytes 32M --factor 4 \
    --iters 20 --warmup 3 --group-size "$group" --compute-gemms "${CALIBRATE_STEP_GEMMS:-20}" --profile "$PROFILE"
done
echo "profile: $PROFILE"
