#!/usr/bin/env bash
# The C++ suites under AddressSanitizer + UndefinedBehaviorSanitizer (scripts/test.sh runs it):
# builds the CPU code and its test binaries into build-sanitize (-DMYRIAD_SANITIZE=address,undefined;
# no CUDA backend, Python module, benchmarks or tools), then runs ctest's cpu label and every
# two-rank dist test. A finding fails its test (-fno-sanitize-recover, halt_on_error).
# Leak checking is on for the cpu label and off under mpirun: Open MPI keeps allocations of its
# own until exit (reported as leaks at MPI_Finalize, not ours).
# Environment: SANITIZE_BUILD_DIR (default build-sanitize), MYRIAD_CMAKE_ARGS, MYRIAD_JOBS.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SANITIZE_BUILD_DIR:-$ROOT/build-sanitize}"
JOBS="${MYRIAD_JOBS:-$(nproc)}"
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 \
  -DMYRIAD_SANITIZE=address,undefined \
  -DMYRIAD_ENABLE_CUDA=OFF -DMYRIAD_BUILD_PYTHON=OFF -DMYRIAD_BUILD_BENCHMARKS=OFF -DMYRIAD_NATIVE=OFF \
  ${MYRIAD_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target myriad_tests myriad_mpi_tests myriad_bench_option_tests
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
echo "[sanitize] ctest -L cpu under ASan + UBSan"
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" ctest --test-dir "$BUILD" -L cpu --output-on-failure --timeout 900
echo "[sanitize] two-rank dist tests under ASan + UBSan"
ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" ctest --test-dir "$BUILD" -L dist -R '\.np2$' --output-on-failure \
  --timeout 1200
echo "[sanitize] clean"
