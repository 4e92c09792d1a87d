#!/usr/bin/env bash
# Runs on the GPU machine (device tool) from the repo root, over binaries that
# tools/gpu/pack.sh put in .carry/. Writes logs to $OUT.
# Usage: tools/gpu/device_run.sh [tests] [sanitize] [bench "ARGS"] ["raw:COMMAND LINE"]...
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# At most 8 files come back: per-binary logs travel as one archive.
LOGS=/tmp/gpulogs; rm -rf "$LOGS"; mkdir -p "$LOGS"
trap 'tar -czf "$OUT/logs.tgz" -C "$LOGS" .' EXIT
# Compiled-in paths (fixtures, test data) point at the development checkout:
# /work/main, or /work/wt for binaries built in the clean worktree.
mkdir -p /work && ln -sfn "$PWD" /work/main && ln -sfn "$PWD" /work/wt
cublas=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$PWD/.carry/lib:$cublas:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"
export PATH="/usr/local/cuda/bin:$PATH"
rc=0
for what in "$@"; do
  case "$what" in
    tests)
      for t in ${GPU_TESTS:-.carry/bin/gpu_*}; do
        log="$LOGS/$(basename "$t").log"
        timeout ${TEST_TIMEOUT:-300} "$t" --gtest_color=no > "$log" 2>&1
        st=$?
        echo "=== $t exit $st: $(grep -E '^\[  (PASSED|FAILED) ' "$log" | tr '\n' ' ')" | tee -a "$OUT/tests.log"
        grep -E '^\[  FAILED  \]' "$log" | head -20
        [ $st = 0 ] || rc=1
      done ;;
    sanitize)
      for t in .carry/bin/gpu_cuda_*_test; do
        for tool in memcheck racecheck; do
          echo "=== $tool $t" | tee -a "$OUT/sanitize.log"
          timeout ${SANITIZE_TIMEOUT:-120} compute-sanitizer --tool $tool --error-exitcode 9 "$t" --gtest_color=no \
            --gtest_filter="${SANITIZE_FILTER:-*Small*:*Odd*:*Tiny*}" 2>&1 | tail -5 | tee -a "$OUT/sanitize.log"
        done
      done ;;
    raw:*) # any command line, e.g. "raw:STRATA_OPTIONS=cuda.pdl=0 .carry/bin/strata bench ..."
       echo "=== ${what#raw:}" | tee -a "$OUT/bench.log"
       eval "${what#raw:}" 2>&1 | tee -a "$OUT/bench.log" ;;
    *) echo "=== strata $what" | tee -a "$OUT/bench.log"
       eval ".carry/bin/strata $what" 2>&1 | tee -a "$OUT/bench.log" ;;
  esac
done
exit $rc
