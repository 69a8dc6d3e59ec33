#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every test.
#   ctest: GoogleTest suites (label cpu; label gpu skips without a device; label dist), the CMake
#          package (install into build/install, build examples/find_package against it), then
#          the Python package: `pip install .` into build/venv (plus torch and transformers for the
#          Hugging Face interchange tests) and pytest against it, then the
#          cpu and two-rank dist tests again under ASan + UBSan (build-sanitize; skip with
#          MYRIAD_SANITIZE_STEP=0).
# Exits non-zero if any step fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
export BUILD_DIR
"$ROOT/scripts/setup.sh"
# The Python package's venv (build/venv; it sees the system's packages: numpy, pytest,
# scikit-build-core, pybind11 from setup.sh). The Hugging Face interchange tests load models in
# `transformers` (with torch, CPU): installed into it here, in the background while the C++
# build runs (about 2 min, 5 GB with torch's CUDA wheels); they are required below.
VENV="$BUILD_DIR/venv"
mkdir -p "$BUILD_DIR"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv --system-site-packages "$VENV"
fi
HF_PID=""
if ! "$VENV/bin/python" -c "import torch, transformers" 2>/dev/null; then
  echo "[test] installing torch and transformers into $VENV in the background (log: $BUILD_DIR/hf-install.log)"
  "$VENV/bin/python" -m pip install -q torch transformers >"$BUILD_DIR/hf-install.log" 2>&1 &
  HF_PID=$!
fi
"$ROOT/scripts/build.sh"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
echo "[test] ctest"
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 600
echo "[test] CMake package: install the build, then build and run examples/find_package against it"
rm -rf "$BUILD_DIR/install" "$BUILD_DIR/example-find-package"
cmake --install "$BUILD_DIR" --prefix "$BUILD_DIR/install" >/dev/null
cmake -S "$ROOT/examples/find_package" -B "$BUILD_DIR/example-find-package" -G Ninja \
  -DCMAKE_PREFIX_PATH="$BUILD_DIR/install" >/dev/null
cmake --build "$BUILD_DIR/example-find-package" >/dev/null
"$BUILD_DIR/example-find-package/myriad_example"
echo "[test] Python package: pip install . into $BUILD_DIR/venv, then pytest against it"
if [ -n "$HF_PID" ] && ! wait "$HF_PID"; then
  cat "$BUILD_DIR/hf-install.log" >&2
  echo "[test] installing torch and transformers failed (log above)" >&2
  exit 1
fi
# The build runs without network (--no-build-isolation). Its CMake build (build/pip-*) skips the
# CUDA backend to keep the test command short: the main build above compiled and tested it.
cd "$ROOT"
"$VENV/bin/python" -m pip install -q --no-build-isolation -C cmake.define.MYRIAD_ENABLE_CUDA=OFF \
  -C cmake.define.MYRIAD_WERROR="$([[ "${MYRIAD_CMAKE_ARGS:-}" == *MYRIAD_WERROR=ON* ]] && echo ON || echo OFF)" .
# MYRIAD_REQUIRE_HF: the Hugging Face interchange tests fail instead of skipping.
MYRIAD_TEST_INSTALLED=1 MYRIAD_REQUIRE_HF=1 PYTHONPATH="" "$VENV/bin/python" -m pytest -q tests/python
if [ "${MYRIAD_SANITIZE_STEP:-1}" != "0" ]; then
  echo "[test] sanitizers: the cpu and two-rank dist tests under ASan + UBSan (scripts/sanitize.sh)"
  "$ROOT/scripts/sanitize.sh"
fi
echo "[test] all tests passed"
