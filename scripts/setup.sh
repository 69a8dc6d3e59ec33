#!/usr/bin/env bash
# Installs what myriad needs to build and test, and only what is missing.
# Idempotent: a second run installs nothing. Used by both README commands and .ci/run.
# Debian packages: compiler, CMake, OpenMPI, OpenBLAS (OpenMP flavour), oneDNN, spdlog, yaml-cpp,
# GoogleTest, nlohmann-json, ICU, zstd, cpp-httplib, nginx and wrk (serving), Slurm and munge (the
# live cluster tests), clang-format, clang with libFuzzer (libclang-rt-14-dev holds
# libclang_rt.fuzzer on Debian 12), and the default corpus (fortunes). Python packages (for the
# bindings and tests): numpy, pytest, pybind11, regex (reference pre-tokenizer in tokenizer tests),
# matplotlib (myriad-plot), PyYAML (myriad plan / sbatch), scikit-build-core (`pip install .`),
# ruff (the test command's Python lint gate). Where the CUDA toolkit has cuDNN (cudnn.h), the
# cuDNN frontend's C++ headers (header-only; PyPI's nvidia-cudnn-frontend wheel, pinned, headers
# only) into /usr/local/lib/myriad-deps/cudnn-frontend: the fused attention of src/cuda/cudnn.
set -euo pipefail

log() { echo "[setup] $*"; }

DEBIAN_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  openmpi-bin libopenmpi-dev
  libopenblas-openmp-dev
  libdnnl2  # oneDNN: its sgemm is the CPU GEMM where it loads (ops/cpu_gemm.h; dlopen, no build dependency)
  libspdlog-dev libfmt-dev libyaml-cpp-dev
  libgtest-dev
  nlohmann-json3-dev libicu-dev libzstd-dev
  libcpp-httplib-dev  # myriad serve's HTTP front (src/serve)
  libssl-dev  # OpenSSL 3: encryption at rest (AES-256-GCM), API-key hashes (scrypt), the audit log's HMACs
  nginx-light wrk  # the serving tests' load balancer in front of replicas and bench_serve's load generator
  slurm-wlm munge  # the live Slurm of the cluster tests (scripts/slurm_local.sh, tests/python/test_slurm_live.py)
  python3 python3-dev python3-pip python3-venv
  clang-format  # the format gate of the test command (tests/python/test_formatting.py)
  clang libclang-rt-14-dev  # the fuzz step (scripts/fuzz.sh): clang-14 and its libFuzzer runtime (libclang_rt.fuzzer)
  fortunes  # the default training corpus (English fortune files, /usr/share/games/fortunes)
)

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  apt_log="$(mktemp)"
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
         --no-install-recommends "${missing[@]}"; } >"$apt_log" 2>&1; then
    cat "$apt_log" >&2
    log "apt-get failed (log above)"
    exit 1
  fi
  rm -f "$apt_log"
else
  log "Debian packages: all present"
fi

PYTHON="${PYTHON:-python3}"
py_missing=()
# module:package — scikit-build-core builds the package (`pip install .`, pyproject.toml).
for pair in numpy:numpy pytest:pytest pybind11:pybind11 regex:regex matplotlib:matplotlib yaml:pyyaml \
  scikit_build_core:scikit-build-core ruff:ruff; do
  if ! "$PYTHON" -c "import ${pair%%:*}" 2>/dev/null; then py_missing+=("${pair#*:}"); fi
done
if [ ${#py_missing[@]} -gt 0 ]; then
  log "installing Python packages: ${py_missing[*]}"
  # Debian's system Python refuses pip installs (PEP 668) unless told otherwise; a pyenv or
  # virtualenv Python accepts them directly.
  if ! "$PYTHON" -m pip install -q "${py_missing[@]}" 2>/dev/null; then
    "$PYTHON" -m pip install -q --break-system-packages "${py_missing[@]}"
  fi
else
  log "Python packages: all present"
fi

# The cuDNN frontend's headers, only where the CUDA toolkit has cuDNN (CMake's optional cuDNN
# attention: cmake/MyriadDependencies.cmake). The wheel also holds Python code and pulls other
# packages: it is downloaded without dependencies and only its include/ folder kept.
CUDNN_FRONTEND_VERSION=1.32.0
FRONTEND_DIR=/usr/local/lib/myriad-deps/cudnn-frontend
CUDA_INCLUDE="${CUDA_HOME:-/usr/local/cuda}/include"
if [ -f "$CUDA_INCLUDE/cudnn.h" ] && [ ! -f "$FRONTEND_DIR/VERSION-$CUDNN_FRONTEND_VERSION" ]; then
  log "installing the cuDNN frontend $CUDNN_FRONTEND_VERSION headers into $FRONTEND_DIR"
  wheel_dir="$(mktemp -d)"
  # Optional: without it the build runs its own attention kernels (configure says "✗ cuDNN").
  if ! "$PYTHON" -m pip download -q --no-deps --only-binary=:all: -d "$wheel_dir" \
    "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION"; then
    log "could not download nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION: building without cuDNN attention"
    rm -rf "$wheel_dir"
    log "done"
    exit 0
  fi
  $SUDO rm -rf "$FRONTEND_DIR"
  $SUDO mkdir -p "$FRONTEND_DIR"
  $SUDO "$PYTHON" - "$wheel_dir"/nvidia_cudnn_frontend-*.whl "$FRONTEND_DIR" <<'PY'
import sys, zipfile
wheel, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as archive:
    archive.extractall(target, [name for name in archive.namelist() if name.startswith("include/")])
PY
  $SUDO touch "$FRONTEND_DIR/VERSION-$CUDNN_FRONTEND_VERSION"
  rm -rf "$wheel_dir"
elif [ -f "$CUDA_INCLUDE/cudnn.h" ]; then
  log "cuDNN frontend $CUDNN_FRONTEND_VERSION headers: present"
fi
log "done"
