#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in ./build-fuzz and fuzzes the
# safetensors header parser for N seconds (default 60).
#
#   tools/fuzz.sh [seconds]
#
# The fuzzer works on a copy of tests/fuzz/corpus/safetensors_header under
# build-fuzz/fuzz-work/, which persists between runs so coverage accumulates;
# the committed corpus only changes by hand. Crashing inputs land in
# build-fuzz/fuzz-work/safetensors_header/artifacts/: fix the bug, then copy the
# input into the committed corpus so fuzz_corpus_replay keeps covering it.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
jobs=${JOBS:-2}
export CC=clang CXX=clang++

cmake -S . -B build-fuzz -G Ninja \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTRATA_CUDA=OFF -DSTRATA_BUILD_FUZZERS=ON \
  -DSTRATA_BUILD_TOOLS=OFF -DSTRATA_BUILD_SAMPLES=OFF -DSTRATA_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build-fuzz -j "$jobs" --target safetensors_header_fuzzer

work=build-fuzz/fuzz-work/safetensors_header
mkdir -p "$work/corpus" "$work/artifacts"
cp -n tests/fuzz/corpus/safetensors_header/* "$work/corpus/" 2>/dev/null || true

# -max_len: headers in the seeds are well under 2 KB; longer inputs mostly
# slow the search down. -rss_limit_mb guards against a parser that allocates
# without bound, which is itself a bug worth reporting.
exec build-fuzz/tests/fuzz/safetensors_header_fuzzer "$work/corpus" \
  -dict=tests/fuzz/safetensors_header.dict \
  -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1
