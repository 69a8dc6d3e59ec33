#!/usr/bin/env bash
# The layers' unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (scripts/test.sh runs
# it): builds myriad_layer_tests and only what it links — core, ops, nn, optim, distributed,
# parallel, config, data — into build-sanitize (-DMYRIAD_SANITIZE=address,undefined at -O1; no
# CUDA backend, train layer, Python module, benchmarks or tools), then runs its tests (ctest label
# `cpu`, of which only myriad_layer_tests is built there: every test of
# tests/{core,ops,nn,optim,distributed,parallel,config,data}) with leak checking. A finding fails
# its test (-fno-sanitize-recover, halt_on_error).
# Not covered here, and run only in the Release build by scripts/test.sh: the train layer's suite
# (myriad_tests: the Engine end to end), the MPI suites (label dist), the emulated CUDA suites.
# The pass is limited to the layers so that the test command stays within its time budget
# (docs/testing.md, "Time budget"); `MYRIAD_SANITIZE_ALL=1` sanitizes every CPU and two-rank
# suite as before (about 17 minutes more on 2 cores).
# Environment: SANITIZE_BUILD_DIR (default build-sanitize), MYRIAD_CMAKE_ARGS, MYRIAD_JOBS,
# MYRIAD_SANITIZE_ALL, MYRIAD_SANITIZE_BUILD_ONLY (1: build, run nothing; test.sh builds this way
# while pytest runs).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SANITIZE_BUILD_DIR:-$ROOT/build-sanitize}"
JOBS="${MYRIAD_JOBS:-$(nproc)}"
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 \
  -DMYRIAD_SANITIZE=address,undefined \
  -DMYRIAD_ENABLE_CUDA=OFF -DMYRIAD_BUILD_PYTHON=OFF -DMYRIAD_BUILD_BENCHMARKS=OFF -DMYRIAD_NATIVE=OFF \
  ${MYRIAD_CMAKE_ARGS:-} >/dev/null
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# The CPU GEMM on OpenBLAS, oneDNN not loaded (ops/cpu_gemm.h): LeakSanitizer's exit check crashes
# ("Tracer caught signal 11") in processes that ran oneDNN's JIT GEMMs, and the sanitizers are for
# myriad's own code; the regular test run covers oneDNN.
export MYRIAD_CPU_GEMM=openblas
targets=(myriad_layer_tests)
[ "${MYRIAD_SANITIZE_ALL:-0}" = "1" ] && targets+=(myriad_tests myriad_mpi_tests myriad_bench_option_tests)
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"
if [ "${MYRIAD_SANITIZE_BUILD_ONLY:-0}" = "1" ]; then
  echo "[sanitize] built (MYRIAD_SANITIZE_BUILD_ONLY): ${targets[*]}"
  exit 0
fi
echo "[sanitize] ctest -L cpu (the built suites: ${targets[*]}) under ASan + UBSan"
# --no-tests=error: a selection that finds nothing fails instead of passing quietly.
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" ctest --test-dir "$BUILD" -L cpu -j "$JOBS" --output-on-failure \
  --timeout 900 --no-tests=error
if [ "${MYRIAD_SANITIZE_ALL:-0}" = "1" ]; then
  # Leak checking is off under mpirun: Open MPI keeps allocations of its own until exit.
  echo "[sanitize] two-rank dist tests under ASan + UBSan"
  ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" ctest --test-dir "$BUILD" -L dist -R '\.np2$' --output-on-failure \
    --timeout 1200 --no-tests=error
fi
echo "[sanitize] clean"
