#!/usr/bin/env bash
# One-shot check on a lent GPU machine: record the machine (nvidia-smi, toolchain), configure the
# reduced build (-DMYRIAD_GPU_ONLY=ON: the layers up to optim, the CUDA backend, GPU tests and benchmarks;
# no MPI, yaml-cpp, ICU or Python needed), build it, run `ctest -L gpu --output-on-failure`, fail
# if a visible GPU still made tests skip, then run the GPU benchmarks (GEMM vs cuBLAS; flash
# attention — CUDA-core, WMMA and cuDNN's fused attention — vs PyTorch SDPA when PyTorch is there;
# PyTorch's GPT-2 124M training step, eager and torch.compile, the baselines of the step bar; NVML's
# metrics; a 131,072-token document, block-sparse vs dense causal). cuDNN: the toolkit's, else
# PyTorch's nvidia-cudnn wheel; its frontend headers travel in the packed dependencies
# and print their tables last. The GEMM and attention benchmarks also
# write the planner's machine profile, $LOGS/machine_profile.json (docs/planning.md).
#
# Dependencies the GPU machine lacks travel as one archive made here by scripts/pack_gpu_deps.sh
# (.gpu-deps/myriad-gpu-deps.tar.xz, ~6 MB: spdlog/fmt/nlohmann-json headers, OpenBLAS, GoogleTest source,
# the cuDNN frontend's headers);
# this script unpacks it into <build-dir>-deps when present (beside the build folder: CMake refuses
# exported include paths inside it). A window's call:
#   run(command="scripts/gpu_check.sh", carry=[".gpu-deps"])    (OUT is set there: logs come back)
#
# Usage: scripts/gpu_check.sh [build-dir]            (default: build-gpu in the repository)
# Env:   OUT                 where the results go when set: the summary (gpu_check.log), the machine
#                            profile and gpu_check-logs.tar.gz with every step's log (<build-dir>/logs)
#                            — three files, since a device call brings back at most eight
#        MYRIAD_DEPS_ARCHIVE the packed dependencies (default: .gpu-deps/myriad-gpu-deps.tar.xz)
#        MYRIAD_DEPS_PREFIX  colon-separated install prefixes of other carried dependencies,
#                            added to CMAKE_PREFIX_PATH
#        MYRIAD_CMAKE_ARGS   extra configure arguments, space-separated
#        JOBS                build parallelism (default: all cores)
#        BENCHMARKS          0 skips the benchmarks (a rerun that checks fixes to the tests)
# Exit:  0 all GPU tests passed; 1 a step failed; 2 no GPU visible (tests skipped);
#        3 dependencies missing (only the CUDA kernels were compiled, with nvcc directly).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build-gpu}"
LOGS="$BUILD/logs"
RESULTS="${OUT:-}"
JOBS="${JOBS:-$(nproc)}"
rm -rf "$LOGS"
mkdir -p "$LOGS"
SUMMARY="$LOGS/gpu_check.log"
: >"$SUMMARY"

# On any exit: the summary, the profile and every log, archived, into $OUT.
deliver_results() {
  [[ -n "$RESULTS" ]] || return 0
  mkdir -p "$RESULTS"
  cp "$SUMMARY" "$RESULTS/" 2>/dev/null || true
  [[ -f "$LOGS/machine_profile.json" ]] && cp "$LOGS/machine_profile.json" "$RESULTS/"
  tar -C "$LOGS" -czf "$RESULTS/gpu_check-logs.tar.gz" . 2>/dev/null || true
}
trap deliver_results EXIT

log() { echo "[gpu_check $(date -u +%H:%M:%S)] $*" | tee -a "$SUMMARY"; }

# step NAME CMD...: runs CMD with its output in $LOGS/NAME.log; on failure shows the log's tail.
step() {
  local name="$1" start="$SECONDS"
  shift
  log "start $name: $*"
  if "$@" >"$LOGS/$name.log" 2>&1; then
    log "ok    $name ($((SECONDS - start)) s)"
  else
    local rc=$?
    log "FAIL  $name (exit $rc, $((SECONDS - start)) s); last lines of $LOGS/$name.log:"
    tail -n 60 "$LOGS/$name.log" | tee -a "$SUMMARY"
    return "$rc"
  fi
}

# Names the dependencies a failed configure could not find.
missing_dependencies() {
  local configure_log="$1"
  {
    grep -o 'provided by "[^"]*"' "$configure_log" | sed 's/provided by "\(.*\)"/\1/'
    grep -o 'find_package for module [^ ]*' "$configure_log" | sed 's/.* //'
    grep -q 'OpenBLAS not found' "$configure_log" && echo OpenBLAS
    grep -q 'Could NOT find OpenMP' "$configure_log" && echo OpenMP
    grep -qE '✗ GTest|GTest::gtest.*not found' "$configure_log" && echo GTest
  } | sort -u | tr '\n' ' ' || true
}

# Fallback when the project cannot be configured: compile every kernel with nvcc and the same
# code-generation flags as kernels/CMakeLists.txt, which proves at least the sm_90a build.
compile_kernels_only() {
  local nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}" out="$BUILD/kernels-only"
  mkdir -p "$out"
  local source
  for source in "$ROOT"/kernels/*/*.cu; do
    "$nvcc" -std=c++20 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=compute_80 \
      -Xptxas -v -I"$ROOT/include" -I"$ROOT/kernels" -c "$source" -o "$out/$(basename "$source").o"
  done
}

log "repository $ROOT, build $BUILD, logs $LOGS, jobs $JOBS"
gpu_count=0
if command -v nvidia-smi >/dev/null 2>&1; then
  step nvidia-smi nvidia-smi || true
  gpu_count="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  nvidia-smi -L 2>/dev/null | tee -a "$SUMMARY" || true
else
  log "nvidia-smi not found"
fi
log "GPUs listed by nvidia-smi: $gpu_count"
step toolchain bash -c 'nvcc --version; cmake --version; (ninja --version || true); (g++ --version || true);
  (git -C "$0" rev-parse HEAD || true); (git -C "$0" status --short || true)' "$ROOT" || true

configure_args=(-S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMYRIAD_GPU_ONLY=ON
                -DMYRIAD_BUILD_BENCHMARKS=ON -DMYRIAD_BUILD_TESTS=ON)
command -v ninja >/dev/null 2>&1 && configure_args+=(-G Ninja)
prefixes="${MYRIAD_DEPS_PREFIX:-}"
# Outside the source and build folders: CMake refuses exported include paths inside either.
DEPS_DIR="${MYRIAD_DEPS_DIR:-${TMPDIR:-/tmp}/myriad-gpu-deps}"
archive="${MYRIAD_DEPS_ARCHIVE:-$ROOT/.gpu-deps/myriad-gpu-deps.tar.xz}"
if [[ -f "$archive" ]]; then
  step unpack-deps bash -c 'rm -rf "$1" && mkdir -p "$1" && tar -C "$1" -xJf "$2" && cat "$1/prefix/PACKED"' \
    _ "$DEPS_DIR" "$archive" || exit 1
  deps="$DEPS_DIR/prefix"
  prefixes="$deps${prefixes:+:$prefixes}"
  configure_args+=("-DMYRIAD_GTEST_SOURCE_DIR=$deps/src/googletest")
  # libopenblas loads the carried libgfortran/libquadmath: the loader must see that folder.
  export LD_LIBRARY_PATH="$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # cuDNN's fused attention: the carried frontend headers (cuDNN itself: below).
  [[ -d "$deps/cudnn-frontend/include" ]] && configure_args+=("-DMYRIAD_CUDNN_FRONTEND_ROOT=$deps/cudnn-frontend")
else
  log "no packed dependencies at $archive (scripts/pack_gpu_deps.sh makes them); using the system's"
fi
[[ -n "$prefixes" ]] && configure_args+=("-DCMAKE_PREFIX_PATH=${prefixes//:/;}")
# NCCL: the toolkit's, else the one PyTorch's nvidia-nccl wheel brings (NcclCommunicator tests).
nccl_wheel="$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)"
[[ -n "$nccl_wheel" && -f "$nccl_wheel/include/nccl.h" ]] && configure_args+=("-DMYRIAD_NCCL_ROOT=$nccl_wheel")
# cuDNN: the toolkit's, else the one PyTorch's nvidia-cudnn wheel brings (headers, libcudnn.so.9),
# which the loader must then find at run time.
if [[ ! -f "${CUDA_HOME:-/usr/local/cuda}/include/cudnn.h" ]]; then
  cudnn_wheel="$(python3 -c 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null || true)"
  if [[ -n "$cudnn_wheel" && -f "$cudnn_wheel/include/cudnn.h" ]]; then
    configure_args+=("-DMYRIAD_CUDNN_ROOT=$cudnn_wheel")
    export LD_LIBRARY_PATH="$cudnn_wheel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    log "cuDNN from PyTorch's nvidia-cudnn: $cudnn_wheel"
  fi
fi
read -r -a extra_args <<<"${MYRIAD_CMAKE_ARGS:-}"
[[ ${#extra_args[@]} -gt 0 ]] && configure_args+=("${extra_args[@]}")

if ! step configure cmake "${configure_args[@]}"; then
  missing="$(missing_dependencies "$LOGS/configure.log")"
  log "configure failed; missing dependencies: ${missing:-unknown (see $LOGS/configure.log)}"
  log "to fix: install them (scripts/setup.sh) or carry an install prefix and set MYRIAD_DEPS_PREFIX"
  if step kernels-only compile_kernels_only; then
    log "the CUDA kernels compile for sm_90a + compute_80 PTX; GPU tests NOT run"
  fi
  exit 3
fi
grep -E '✓|✗' "$LOGS/configure.log" | tee -a "$SUMMARY" || true
grep -q '✓ CUDA' "$LOGS/configure.log" || { log "configure found no CUDA toolkit: nothing to test"; exit 1; }

step build cmake --build "$BUILD" --target myriad_gpu_tests bench_gemm_gpu bench_attention_gpu bench_gpt2_step_gpu \
  bench_gpu_metrics bench_long_context_gpu -j "$JOBS" || exit 1
ctest_args=(--test-dir "$BUILD" -L gpu --output-on-failure --timeout 300)
[[ "$(ctest --help 2>/dev/null)" == *--output-junit* ]] && ctest_args+=(--output-junit "$LOGS/ctest-gpu.xml")
ctest_status=0
step ctest ctest "${ctest_args[@]}" || ctest_status=$?
grep -E 'tests passed|tests failed|\*\*\*Failed|\(Failed\)|Timeout' "$LOGS/ctest.log" | tail -n 50 | tee -a "$SUMMARY" || true
skipped="$(grep -c '\*\*\*Skipped' "$LOGS/ctest.log" || true)"
# Skips for want of any device (the support macro's message) mean the runtime sees no GPU; others
# (a test that needs two GPUs on a one-GPU machine) are expected. The JUnit file holds the messages.
no_device_skips="$skipped"
if [[ -f "$LOGS/ctest-gpu.xml" ]]; then
  no_device_skips="$({ grep -o 'no CUDA device' "$LOGS/ctest-gpu.xml" || true; } | wc -l)"
  grep -o 'needs [a-z]* CUDA devices' "$LOGS/ctest-gpu.xml" | sort | uniq -c | sed 's/^/  skipped: /' | tee -a "$SUMMARY" || true
fi
# The benchmarks run whatever the tests said (a lent GPU is rare); their tables go last.
if [[ "$gpu_count" -gt 0 && "${BENCHMARKS:-1}" != 0 ]]; then
  # Both merge their rates into the planner's machine profile (myriad plan --profile FILE).
  step bench_gemm_gpu "$BUILD/benchmarks/bench_gemm_gpu" --profile "$LOGS/machine_profile.json" || true
  # T 1k-16k (--long; 8k and 16k add about 40 s: every shape does the same work per T, 16k tokens).
  step sdpa_reference python3 "$ROOT/benchmarks/gpu/sdpa_reference.py" "$LOGS/sdpa.txt" --long || true
  sdpa_args=()
  [[ -s "$LOGS/sdpa.txt" ]] && sdpa_args=(--sdpa "$LOGS/sdpa.txt")
  step bench_attention_gpu "$BUILD/benchmarks/bench_attention_gpu" --long "${sdpa_args[@]}" \
    --profile "$LOGS/machine_profile.json" || true
  # The planner's GEMM shape model against the cuBLAS rates bench_gemm_gpu just wrote (docs/planning.md,
  # "Kernel times from shapes"): the H100/H200 constants the model still assumes, checked here.
  gpu_kind=h100
  nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H200 && gpu_kind=h200
  step planner_gemm_check env PYTHONPATH="$ROOT/python" python3 -m myriad.planner.validation \
    --gemm-profile "$LOGS/machine_profile.json" --gpu "$gpu_kind" || true
  # The PyTorch GPT-2 124M step (B 16, T 1024, bf16): the baseline of the training-step bar.
  step gpt2_step_reference python3 "$ROOT/benchmarks/gpu/gpt2_step_reference.py" "$LOGS/gpt2_reference.txt" || true
  step gpt2_step_compiled timeout 180 python3 "$ROOT/benchmarks/gpu/gpt2_step_reference.py" --compile \
    "$LOGS/gpt2_compiled.txt" || true
  reference_args=()
  [[ -s "$LOGS/gpt2_reference.txt" ]] && reference_args=(--reference "$LOGS/gpt2_reference.txt")
  [[ -s "$LOGS/gpt2_compiled.txt" ]] && reference_args+=(--compiled "$LOGS/gpt2_compiled.txt")
  step bench_gpt2_step_gpu "$BUILD/benchmarks/bench_gpt2_step_gpu" "${reference_args[@]}" || true
  # The monitoring line's GPU fields from the driver (NVML), idle and under HBM and PCIe traffic.
  step bench_gpu_metrics "$BUILD/benchmarks/bench_gpu_metrics" || true
  # A 131,072-token document on the GPU: block-sparse vs dense causal, evaluation and training.
  step bench_long_context_gpu "$BUILD/benchmarks/bench_long_context_gpu" --tokens 131072 --passes 2 || true
  for table in bench_gemm_gpu planner_gemm_check bench_attention_gpu gpt2_step_reference gpt2_step_compiled \
    bench_gpt2_step_gpu \
    bench_gpu_metrics bench_long_context_gpu; do
    [[ -f "$LOGS/$table.log" ]] && tee -a "$SUMMARY" <"$LOGS/$table.log"
  done
  [[ -f "$LOGS/machine_profile.json" ]] && tee -a "$SUMMARY" <"$LOGS/machine_profile.json"
fi

if [[ "$ctest_status" -ne 0 ]]; then
  log "RESULT: GPU tests FAILED (ctest exit $ctest_status)"
  exit 1
elif [[ "$gpu_count" -gt 0 && "$no_device_skips" -gt 0 ]]; then
  log "RESULT: $gpu_count GPU(s) listed but $no_device_skips test(s) skipped for want of a device: the runtime sees none"
  exit 1
elif [[ "$gpu_count" -eq 0 ]]; then
  log "RESULT: no GPU visible; $skipped test(s) skipped, the rest passed"
  exit 2
fi
log "RESULT: all GPU tests passed on $gpu_count GPU(s) ($skipped skipped: they need more GPUs)"
