#!/usr/bin/env bash
# Configures and builds myriad into build/ (Release, Ninja). Used by test.sh and train.sh.
# Environment: BUILD_DIR (default build), MYRIAD_CMAKE_ARGS (extra configure flags),
# MYRIAD_JOBS (parallel compile jobs, default: number of CPUs), PYTHON (the interpreter the
# extension is built for, default python3; test.sh passes its venv's, so that `pip install .` from
# that venv finds the same settings in the build folder and compiles nothing again).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
JOBS="${MYRIAD_JOBS:-$(nproc)}"
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v "${PYTHON:-python3}")" \
  ${MYRIAD_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$JOBS"
