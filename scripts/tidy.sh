#!/usr/bin/env bash
# clang-tidy with the repository's .clang-tidy over C++ sources of the build's
# compile_commands.json (CUDA files excluded: clang-tidy does not parse nvcc's dialect).
#   scripts/tidy.sh            the .cpp files changed by the last commit (BASE = HEAD~1)
#   scripts/tidy.sh BASE       the .cpp files changed since commit BASE (and uncommitted ones)
#   scripts/tidy.sh --all      every .cpp file of the build (a few minutes per core)
# Headers are checked through the files that include them (HeaderFilterRegex). Exit 1 when a
# check reports anything. Environment: BUILD_DIR (default build; configure it first), MYRIAD_JOBS.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
JOBS="${MYRIAD_JOBS:-$(nproc)}"
cd "$ROOT"
[ -f "$BUILD_DIR/compile_commands.json" ] || { echo "tidy: no $BUILD_DIR/compile_commands.json (run scripts/build.sh)" >&2; exit 2; }
if [ "${1:-}" = "--all" ]; then
  mapfile -t files < <(python3 -c 'import json,sys; print("\n".join(sorted({e["file"] for e in json.load(open(sys.argv[1])) if e["file"].endswith(".cpp") and "/build" not in e["file"]})))' "$BUILD_DIR/compile_commands.json")
else
  base="${1:-HEAD~1}"
  mapfile -t files < <({ git diff --name-only "$base" -- '*.cpp'; git ls-files --others --exclude-standard -- '*.cpp'; } | sort -u |
                       while read -r f; do [ -f "$f" ] && echo "$ROOT/$f"; done)
fi
if [ ${#files[@]} -eq 0 ]; then echo "tidy: no C++ files to check"; exit 0; fi
echo "tidy: ${#files[@]} file(s)"
out="$(mktemp)"
printf '%s\n' "${files[@]}" | xargs -P "$JOBS" -n 4 clang-tidy -p "$BUILD_DIR" --quiet >"$out" 2>/dev/null || true
if grep -E "(warning|error):" "$out" >/dev/null; then
  grep -E -A3 "(warning|error):" "$out"
  echo "tidy: $(grep -cE '(warning|error):' "$out") finding(s)"
  rm -f "$out"
  exit 1
fi
rm -f "$out"
echo "tidy: clean"
