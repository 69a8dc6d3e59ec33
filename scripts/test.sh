#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every test.
#   ctest: GoogleTest suites (label cpu; label gpu skips without a device; label dist once the
#          distributed layer lands), then pytest for the Python package.
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
echo "[test] pytest"
cd "$ROOT"
PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest -q tests/python
echo "[test] all tests passed"
