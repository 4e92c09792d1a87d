#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in ./build-fuzz and fuzzes one of
# them for N seconds (default 60):
#
#   tools/fuzz.sh [TARGET] [seconds]
#
# TARGET: safetensors_header (default), jinja (chat-template parsing and
# rendering under a budget), tool_call (the tool-call parsers) or host_json
# (JSON texts from the host). A lone number is the seconds for the default.
#
# The fuzzer works on a copy of the target's committed corpus
# (tests/fuzz/corpus/<corpus>) under build-fuzz/fuzz-work/<target>, which
# persists between runs so coverage accumulates; the committed corpus only
# changes by hand. Crashing inputs land in build-fuzz/fuzz-work/<target>/artifacts/:
# fix the bug, then copy the input into the committed corpus so
# fuzz_corpus_replay keeps covering it.
set -euo pipefail
cd "$(dirname "$0")/.."

target=safetensors_header
if [[ $# -gt 0 && ! "$1" =~ ^[0-9]+$ ]]; then
  target=$1
  shift
fi
secs=${1:-60}
jobs=${JOBS:-2}
case "$target" in
  safetensors_header) corpus=safetensors_header ;;
  jinja) corpus=jinja ;;
  tool_call) corpus=tool_calls ;;
  host_json) corpus=host_json ;;
  *) echo "unknown target '$target' (safetensors_header, jinja, tool_call, host_json)" >&2; exit 2 ;;
esac
export CC=clang CXX=clang++

cmake -S . -B build-fuzz -G Ninja \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTRATA_CUDA=OFF -DSTRATA_BUILD_FUZZERS=ON \
  -DSTRATA_BUILD_TOOLS=OFF -DSTRATA_BUILD_SAMPLES=OFF -DSTRATA_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build-fuzz -j "$jobs" --target "${target}_fuzzer"

work=build-fuzz/fuzz-work/$target
mkdir -p "$work/corpus" "$work/artifacts"
cp -n "tests/fuzz/corpus/$corpus"/* "$work/corpus/" 2>/dev/null || true

# -max_len: the seeds that matter are well under 4 KB; longer inputs mostly
# slow the search down. -rss_limit_mb guards against code that allocates
# without bound, which is itself a bug worth reporting; -timeout likewise
# against inputs that run without bound (a render has a step budget).
exec "build-fuzz/tests/fuzz/${target}_fuzzer" "$work/corpus" \
  -dict="tests/fuzz/$target.dict" \
  -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1
