#!/usr/bin/env bash
# Fuzzes the readers of untrusted input with libFuzzer (tests/fuzz/, docs/testing.md "Fuzzing"):
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     (default 10; a long run: scripts/fuzz.sh 600)
# 1. builds the fuzz targets with clang into their own folder (MYRIAD_FUZZ_DIR, default
#    build-fuzz/; -DMYRIAD_BUILD_FUZZERS=ON compiles only the readers' sources, ASan + UBSan);
# 2. writes the seed corpora (fuzz_seeds; configs/*.yaml for the YAML reader);
# 3. replays every kept regression input (tests/fuzz/regressions/<target>/: inputs that once
#    crashed a reader), then fuzzes each target for SECONDS_PER_TARGET, MYRIAD_FUZZ_PARALLEL
#    (default 2) at a time; the corpus grows in <dir>/corpus/<target> from run to run.
# Prints each target's executions (libFuzzer's "Done N runs") and exits non-zero on any crash,
# hang (> 10 s for one input), leak or sanitizer finding, naming the input it saved under
# <dir>/artifacts/<target>/. Without clang or libFuzzer it prints why and exits 0 (skipped).
# Environment: MYRIAD_FUZZ_DIR, MYRIAD_FUZZ_PARALLEL, MYRIAD_JOBS (compile jobs), MYRIAD_FUZZ_CXX
# (the clang++ to use), MYRIAD_FUZZ_BUILD_ONLY (1: build the targets, fuzz nothing).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_PER_TARGET="${1:-10}"
[[ "$SECONDS_PER_TARGET" =~ ^[0-9]+$ ]] || { echo "usage: scripts/fuzz.sh [seconds-per-target]" >&2; exit 2; }
FUZZ_DIR="${MYRIAD_FUZZ_DIR:-$ROOT/build-fuzz}"
PARALLEL="${MYRIAD_FUZZ_PARALLEL:-2}"
JOBS="${MYRIAD_JOBS:-$(nproc)}"

CXX_FUZZ="${MYRIAD_FUZZ_CXX:-}"
if [ -z "$CXX_FUZZ" ]; then
  for candidate in clang++-14 clang++; do
    if command -v "$candidate" >/dev/null; then CXX_FUZZ="$(command -v "$candidate")"; break; fi
  done
fi
if [ -z "$CXX_FUZZ" ]; then
  echo "[fuzz] skipped: no clang++ (install clang and libclang-rt-14-dev: scripts/setup.sh)"
  exit 0
fi
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/probe.cpp"
if ! "$CXX_FUZZ" -fsanitize=fuzzer,address,undefined "$probe/probe.cpp" -o "$probe/probe" 2>"$probe/log"; then
  echo "[fuzz] skipped: $CXX_FUZZ cannot link -fsanitize=fuzzer (not clang, or libclang_rt.fuzzer missing:" \
       "install clang and libclang-rt-14-dev, scripts/setup.sh): $(head -c 300 "$probe/log")"
  exit 0
fi
CC_FUZZ="${CXX_FUZZ/clang++/clang}"

echo "[fuzz] building the fuzz targets with $CXX_FUZZ into $FUZZ_DIR"
mkdir -p "$FUZZ_DIR"
cmake -S "$ROOT" -B "$FUZZ_DIR" -G Ninja -DMYRIAD_BUILD_FUZZERS=ON -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_COMPILER="$CXX_FUZZ" -DCMAKE_C_COMPILER="$CC_FUZZ" >"$FUZZ_DIR/configure.log" 2>&1 ||
  { cat "$FUZZ_DIR/configure.log" >&2; exit 1; }
cmake --build "$FUZZ_DIR" -j "$JOBS"
if [ "${MYRIAD_FUZZ_BUILD_ONLY:-0}" = "1" ]; then
  echo "[fuzz] built (MYRIAD_FUZZ_BUILD_ONLY)"
  exit 0
fi
read -r -a TARGETS <<<"$(tr ';' ' ' <"$FUZZ_DIR/fuzz_targets.txt")"

# Seeds: the project's writers (fuzz_seeds) and the shipped configs.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
rm -rf "$FUZZ_DIR/seeds"
"$FUZZ_DIR/fuzz_seeds" "$FUZZ_DIR/seeds"
mkdir -p "$FUZZ_DIR/seeds/run_config"
cp "$ROOT"/configs/*.yaml "$FUZZ_DIR/seeds/run_config/"

# run_target NAME: the regression inputs once each, then SECONDS_PER_TARGET of fuzzing.
run_target() {
  local name="$1" binary="$FUZZ_DIR/fuzz_$1" log="$FUZZ_DIR/logs/$1.log"
  local regressions="$ROOT/tests/fuzz/regressions/$name"
  mkdir -p "$FUZZ_DIR/corpus/$name" "$FUZZ_DIR/artifacts/$name" "$FUZZ_DIR/seeds/$name"
  : >"$log"
  if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
    if ! "$binary" -timeout=10 "$regressions"/* >>"$log" 2>&1; then
      echo "[fuzz] $name: a kept regression input fails again (log: $log)"
      return 1
    fi
  fi
  if ! "$binary" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$FUZZ_DIR/artifacts/$name/" "$FUZZ_DIR/corpus/$name" "$FUZZ_DIR/seeds/$name" \
       >>"$log" 2>&1; then
    echo "[fuzz] $name: FOUND A BUG — input saved as $(ls -t "$FUZZ_DIR/artifacts/$name" | head -1) in" \
         "$FUZZ_DIR/artifacts/$name/ (log: $log)"
    return 1
  fi
  local runs
  runs="$(grep -o 'Done [0-9]* runs' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')"
  printf '[fuzz] %-20s %9s executions in %s s, corpus %s inputs\n' "$name" "$runs" "$SECONDS_PER_TARGET" \
    "$(find "$FUZZ_DIR/corpus/$name" -type f | wc -l)"
}

mkdir -p "$FUZZ_DIR/logs"
echo "[fuzz] ${#TARGETS[@]} targets, $SECONDS_PER_TARGET s each, $PARALLEL at a time"
failed=0
pids=()
for name in "${TARGETS[@]}"; do
  run_target "$name" &
  pids+=("$!")
  if [ "${#pids[@]}" -ge "$PARALLEL" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
if [ "$failed" -ne 0 ]; then
  echo "[fuzz] failed: fix the reader (a myriad::Error naming the file), keep the input under" \
       "tests/fuzz/regressions/<target>/" >&2
  exit 1
fi
echo "[fuzz] no crash, hang or leak"
