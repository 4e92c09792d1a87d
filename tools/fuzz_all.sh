#!/usr/bin/env bash
# Fuzzes every libFuzzer target in turn, each for SECONDS with JOBS parallel
# workers, and prints one line per target with the executions (summed over
# the workers) and the crashes found; exits 1 when any target crashed (or
# timed out, or ran out of memory), 2 on a usage or setup error.
#
#   tools/fuzz_all.sh SECONDS_PER_TARGET JOBS
#
# The binaries come from FUZZ_BUILD_DIR (default ./build-fuzz, as
# tools/fuzz.sh builds it; nothing is built here), so a build-fuzz directory
# can be copied to a bigger x86-64 Linux machine and run there from any
# checkout of the repository: the corpora (tests/fuzz/corpus) and
# dictionaries come from the checkout this script is in, and the binaries
# need no other file. Work (a copy of each corpus that grows as the workers
# find inputs, their logs, crash artifacts) goes to FUZZ_WORK_DIR (default
# FUZZ_BUILD_DIR/fuzz-all-work); the committed corpora are never written.
# FUZZ_TARGETS (space-separated) picks a subset of tools/fuzz_targets.sh's;
# FUZZ_FLAGS (space-separated) adds libFuzzer flags to every worker, e.g.
# "-entropic=0" for raw throughput on a long run.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/tools/fuzz_targets.sh"

if [[ $# -ne 2 || ! "$1" =~ ^[0-9]+$ || ! "$2" =~ ^[0-9]+$ || "$2" -lt 1 ]]; then
  echo "usage: $0 SECONDS_PER_TARGET JOBS" >&2
  exit 2
fi
secs=$1
jobs=$2
build=$(cd "${FUZZ_BUILD_DIR:-$repo/build-fuzz}" 2>/dev/null && pwd) || {
  echo "fuzz_all: no build directory ${FUZZ_BUILD_DIR:-$repo/build-fuzz} (tools/fuzz.sh builds one)" >&2
  exit 2
}
work=${FUZZ_WORK_DIR:-$build/fuzz-all-work}
read -r -a targets <<<"${FUZZ_TARGETS:-${STRATA_FUZZ_TARGETS[*]}}"
read -r -a extra_flags <<<"${FUZZ_FLAGS:-}"

# Sums a libFuzzer statistic over worker logs; "Done N runs" stands in for
# number_of_executed_units in a log without final stats.
sum_execs() {
  local total=0 log n
  for log in "$@"; do
    n=$(grep -ao 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' ||
        grep -ao 'Done [0-9]* runs' "$log" | tail -1 | grep -o '[0-9]\+' || echo 0)
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

status=0
total_execs=0
total_crashes=0
printf '%-20s %14s %8s  %s\n' target executions crashes notes
for target in "${targets[@]}"; do
  if ! fuzz_known "$target"; then
    echo "fuzz_all: unknown target '$target' (${STRATA_FUZZ_TARGETS[*]})" >&2
    exit 2
  fi
  bin=$build/tests/fuzz/${target}_fuzzer
  if [[ ! -x "$bin" ]]; then
    printf '%-20s %14s %8s  %s\n' "$target" - - "no binary at $bin"
    status=2
    continue
  fi
  dir=$work/$target
  run=$dir/run-$(date +%Y%m%d-%H%M%S)
  mkdir -p "$dir/corpus" "$run/artifacts"
  cp -n "$repo/tests/fuzz/corpus/$(fuzz_corpus_of "$target")"/* "$dir/corpus/" 2>/dev/null || true
  # With -jobs each worker is a whole fuzzing run writing fuzz-<n>.log in the
  # current directory; all of them share (and reload) the corpus directory.
  (cd "$run" && "$bin" "$dir/corpus" -jobs="$jobs" -workers="$jobs" \
     -dict="$repo/tests/fuzz/$target.dict" -max_total_time="$secs" \
     -max_len="$(fuzz_max_len_of "$target")" -rss_limit_mb=2048 -timeout=10 \
     -artifact_prefix="$run/artifacts/" -print_final_stats=1 "${extra_flags[@]}" \
     >"$run/main.log" 2>&1) || true
  shopt -s nullglob
  logs=("$run"/fuzz-*.log)
  ((${#logs[@]})) || logs=("$run/main.log")
  artifacts=("$run"/artifacts/crash-* "$run"/artifacts/leak-* "$run"/artifacts/timeout-* \
             "$run"/artifacts/oom-*)
  shopt -u nullglob
  execs=$(sum_execs "${logs[@]}")
  crashes=${#artifacts[@]}
  notes="corpus $(find "$dir/corpus" -type f | wc -l) files"
  if ((crashes)); then
    notes="$notes; artifacts in $run/artifacts"
    status=$((status == 2 ? 2 : 1))
  fi
  printf '%-20s %14s %8s  %s\n' "$target" "$execs" "$crashes" "$notes"
  total_execs=$((total_execs + execs))
  total_crashes=$((total_crashes + crashes))
done
printf '%-20s %14s %8s\n' total "$total_execs" "$total_crashes"
exit "$status"
