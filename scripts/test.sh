#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every test.
#   ctest: GoogleTest suites (label cpu; label gpu skips without a device; label dist), the CMake
#          package (install into build/install, build examples/find_package against it), then
#          pytest for the Python package.
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
echo "[test] pytest"
cd "$ROOT"
PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest -q tests/python
echo "[test] all tests passed"
