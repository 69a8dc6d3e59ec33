#!/usr/bin/env bash
# Runs the CPU ops' x86-64-v4, v3 and baseline clones (src/ops/cpu/cpu_clones.h) on this machine,
# each through the layers' unit tests and bench_cpu_ops. The loader always picks the widest clone
# the CPU supports, so on an AVX-512 machine the v3 (AVX2 + FMA) and baseline (SSE2) bodies would
# never run; each level therefore gets a portable build of its own whose widest clone is that level
# (-DMYRIAD_NATIVE=OFF -DMYRIAD_CPU_CLONE_WIDEST=...), under $CLONES_BUILD_ROOT/<level>. Each
# build's bench header names the clone it ran, and the script fails if that is not the level asked
# for (a CPU without the level cannot run it: it is skipped, and said so).
# Not part of the test command (three more builds, ~15 minutes on 2 cores); run it by hand after
# changing a marked kernel, and on a machine of another ISA (docs/testing.md, "The CPU clones").
# Environment: CLONES_BUILD_ROOT (default build-clones), CLONE_LEVELS (default
# "x86-64-v4 x86-64-v3 baseline"), MYRIAD_JOBS, MYRIAD_CMAKE_ARGS, BENCH_ARGS (to bench_cpu_ops).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_ROOT="${CLONES_BUILD_ROOT:-$ROOT/build-clones}"
JOBS="${MYRIAD_JOBS:-$(nproc)}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"

cpu_has() {  # cpu_has LEVEL FLAG: /proc/cpuinfo lists the level's key flag (the header check below confirms the loader's choice)
  case "$1" in
    baseline) return 0 ;;
    *) grep -q "$2" /proc/cpuinfo ;;
  esac
}
expected_clone() {  # the words bench_cpu_ops' header must show for LEVEL
  case "$1" in
    x86-64-v4) echo "the x86-64-v4 (AVX-512) clones" ;;
    x86-64-v3) echo "the x86-64-v3 (AVX2 + FMA) clones" ;;
    baseline) echo "the baseline alone" ;;
  esac
}

summary=()
for level in ${CLONE_LEVELS:-x86-64-v4 x86-64-v3 baseline}; do
  case "$level" in
    x86-64-v4) flag=avx512f ;;
    x86-64-v3) flag=avx2 ;;
    baseline) flag="" ;;
    *)
      echo "[clones] CLONE_LEVELS: unknown level '$level' (x86-64-v4, x86-64-v3 or baseline)" >&2
      exit 2
      ;;
  esac
  if ! cpu_has "$level" "$flag"; then
    echo "[clones] $level: this CPU lacks $flag; skipped"
    summary+=("$level: skipped (no $flag)")
    continue
  fi
  build="$BUILD_ROOT/$level"
  echo "[clones] $level: building myriad_layer_tests and bench_cpu_ops in $build"
  # shellcheck disable=SC2086
  cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMYRIAD_NATIVE=OFF \
    -DMYRIAD_CPU_CLONE_WIDEST="$level" -DMYRIAD_ENABLE_CUDA=OFF -DMYRIAD_BUILD_PYTHON=OFF \
    ${MYRIAD_CMAKE_ARGS:-} >/dev/null
  cmake --build "$build" -j "$JOBS" --target myriad_layer_tests bench_cpu_ops
  # shellcheck disable=SC2086
  bench="$("$build/benchmarks/bench_cpu_ops" ${BENCH_ARGS:-})"
  echo "$bench"
  want="$(expected_clone "$level")"
  if ! grep -qF "$want" <<<"$bench"; then
    echo "[clones] $level: bench_cpu_ops' header does not name '$want'" >&2
    exit 1
  fi
  echo "[clones] $level: the layers' unit tests"
  "$build/tests/myriad_layer_tests" --gtest_brief=1
  summary+=("$level: $(grep -m1 "^- the CPU ops' vector kernels: " <<<"$bench" | sed "s/^- the CPU ops' vector kernels: //"); layer tests passed")
done
echo "[clones] summary"
printf '  %s\n' "${summary[@]}"
