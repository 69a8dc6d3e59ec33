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
# The venv sees the system's packages (numpy, pytest, scikit-build-core, pybind11: setup.sh), so
# the build runs without network (--no-build-isolation). Its CMake build (build/pip-*) skips the
# CUDA backend to keep the test command short: the main build above compiled and tested it.
VENV="$BUILD_DIR/venv"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv --system-site-packages "$VENV"
fi
cd "$ROOT"
"$VENV/bin/python" -m pip install -q --no-build-isolation -C cmake.define.MYRIAD_ENABLE_CUDA=OFF \
  -C cmake.define.MYRIAD_WERROR="$([[ "${MYRIAD_CMAKE_ARGS:-}" == *MYRIAD_WERROR=ON* ]] && echo ON || echo OFF)" .
# The Hugging Face interchange tests load models in `transformers` (with torch, CPU); installed
# here (about 2 min, 5 GB with torch's CUDA wheels) and required: they fail instead of skipping.
if ! "$VENV/bin/python" -c "import torch, transformers" 2>/dev/null; then
  echo "[test] installing torch and transformers into $VENV (Hugging Face interchange tests)"
  "$VENV/bin/python" -m pip install -q torch transformers
fi
MYRIAD_TEST_INSTALLED=1 MYRIAD_REQUIRE_HF=1 PYTHONPATH="" "$VENV/bin/python" -m pytest -q tests/python
if [ "${MYRIAD_SANITIZE_STEP:-1}" != "0" ]; then
  echo "[test] sanitizers: the cpu and two-rank dist tests under ASan + UBSan (scripts/sanitize.sh)"
  "$ROOT/scripts/sanitize.sh"
fi
echo "[test] all tests passed"
