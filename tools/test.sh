#!/usr/bin/env bash
# The whole test suite: install dependencies, build everything (CUDA code too
# when nvcc exists), run every CPU test, then fuzz every parser of outside
# data briefly where clang has libFuzzer. GPU tests (label gpu) run on a GPU
# machine with `ctest --test-dir build -L gpu`.
#
# FUZZ_SECONDS (default 20) is each fuzz target's time; 0 skips fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
# With CUDA, the per-CTA probe's variant of the kernels it instruments
# (compile only; src/backend/cuda/cta_probe.cuh).
targets=$(ninja -C build -t targets all 2>/dev/null || true)
if grep -q "^strata_cta_probe_check:" <<<"$targets"; then
  cmake --build build --target strata_cta_probe_check -j "${JOBS:-$(nproc)}"
fi
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE gpu

# A short run of each fuzzer: the corpora are replayed by ctest already
# (fuzz_corpus_replay); this looks a little past them on every change.
fuzz_secs=${FUZZ_SECONDS:-20}
if ((fuzz_secs > 0)); then
  probe=$(mktemp -d)
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
    >"$probe/probe.cc"
  if command -v clang++ >/dev/null &&
     clang++ -fsanitize=fuzzer "$probe/probe.cc" -o "$probe/probe" >/dev/null 2>&1; then
    workers=$(nproc)
    ((workers > 8)) && workers=8
    JOBS=${JOBS:-$(nproc)} bash tools/fuzz.sh --build
    bash tools/fuzz_all.sh "$fuzz_secs" "$workers"
  else
    echo "test: clang with libFuzzer not found; fuzzers not run"
  fi
  rm -rf "$probe"
fi
