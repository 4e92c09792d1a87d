#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in ./build-fuzz and fuzzes one of
# them for N seconds (default 60):
#
#   tools/fuzz.sh [TARGET] [seconds]
#   tools/fuzz.sh --build          (builds every target, fuzzes none)
#
# TARGET (tools/fuzz_targets.sh lists them): safetensors_header (default),
# safetensors_index (model.safetensors.index.json), config (config.json and
# every architecture's parser), tokenizer_json, tokenizer_config (with its
# chat template), tiktoken (rank files), jinja (chat-template parsing and
# rendering under a budget), tool_call (the tool-call parsers), host_json
# (JSON texts from the host), session_file (saved sessions) or state_object
# (the disk tier's objects). A lone number is the seconds for the default.
# JOBS (default 2) is the build's parallelism; FUZZ_JOBS (default 1) the
# number of fuzzing processes. tools/fuzz_all.sh runs every target.
#
# The fuzzer works on a copy of the target's committed corpus
# (tests/fuzz/corpus/<corpus>) under build-fuzz/fuzz-work/<target>, which
# persists between runs so coverage accumulates; the committed corpus only
# changes by hand. Crashing inputs land in build-fuzz/fuzz-work/<target>/artifacts/:
# fix the bug, then copy the input into the committed corpus so
# fuzz_corpus_replay keeps covering it.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/fuzz_targets.sh

target=safetensors_header
build_only=false
if [[ "${1:-}" == --build ]]; then
  build_only=true
elif [[ $# -gt 0 && ! "$1" =~ ^[0-9]+$ ]]; then
  target=$1
  shift
fi
secs=${1:-60}
jobs=${JOBS:-2}
fuzz_jobs=${FUZZ_JOBS:-1}
if ! $build_only && ! fuzz_known "$target"; then
  echo "unknown target '$target' (${STRATA_FUZZ_TARGETS[*]})" >&2
  exit 2
fi
corpus=$(fuzz_corpus_of "$target")
export CC=clang CXX=clang++

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build-fuzz -G Ninja \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTRATA_CUDA=OFF -DSTRATA_BUILD_FUZZERS=ON \
  -DSTRATA_BUILD_TOOLS=OFF -DSTRATA_BUILD_SAMPLES=OFF -DSTRATA_BUILD_BENCHMARKS=OFF >/dev/null
if $build_only; then
  cmake --build build-fuzz -j "$jobs" --target "${STRATA_FUZZ_TARGETS[@]/%/_fuzzer}"
  exit 0
fi
cmake --build build-fuzz -j "$jobs" --target "${target}_fuzzer"

work=build-fuzz/fuzz-work/$target
mkdir -p "$work/corpus" "$work/artifacts"
cp -n "tests/fuzz/corpus/$corpus"/* "$work/corpus/" 2>/dev/null || true

# -max_len: the seeds that matter fit (fuzz_targets.sh); longer inputs mostly
# slow the search down. -rss_limit_mb guards against code that allocates
# without bound, which is itself a bug worth reporting; -timeout likewise
# against inputs that run without bound (a render has a step budget).
# With FUZZ_JOBS > 1 the workers write fuzz-<n>.log into the current
# directory, so the run happens in the work directory.
parallel=()
if ((fuzz_jobs > 1)); then parallel=(-jobs="$fuzz_jobs" -workers="$fuzz_jobs"); fi
root=$(pwd)
cd "$work"
exec "$root/build-fuzz/tests/fuzz/${target}_fuzzer" corpus "${parallel[@]}" \
  -dict="$root/tests/fuzz/$target.dict" \
  -max_total_time="$secs" -max_len="$(fuzz_max_len_of "$target")" -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix=artifacts/ -print_final_stats=1
