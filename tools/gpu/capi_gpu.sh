#!/usr/bin/env bash
# Runs on the GPU machine (device tool) from the repo root: the C ABI on the
# GPU, over binaries built on the development machine and carried in .carry/
# (libstrata.so.1, the capi_* tests, the strata CLI, sample_01_generate,
# strata-agent, their Abseil/PCRE2/gtest libraries). Logs go to $OUT.
# The same C test programs as CI's, with STRATA_TEST_DEVICE=cuda; then the
# C ABI's tokens against the CLI's, and the samples with --device auto.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# Compiled-in paths point at the development checkout (/work/main/<build>).
mkdir -p /work && ln -sfn "$PWD" /work/main
cublas=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$PWD/.carry/lib:$cublas:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
B=/work/main/${BUILD_DIR:-build-cuda}; mkdir -p "$B/testdata"
.carry/bin/capi_make_demo_model "$B/testdata/demo_kimi" > /dev/null || exit 1
rc=0
run() {
  local name=$1; shift
  echo "=== $name"
  "$@" > "$OUT/$name.log" 2>&1
  local st=$?
  tail -3 "$OUT/$name.log"
  grep -E "CHECK failed|returned .*expected|FAILED" "$OUT/$name.log" | head -20
  echo "exit $st"
  [ $st = 0 ] || rc=1
}
for t in abi c_api serving_api text_api; do
  run "capi_${t}_gpu" env STRATA_TEST_DEVICE=cuda ".carry/bin/capi_${t}_test" "$B/testdata/demo_kimi"
done
run capi_abi_default .carry/bin/capi_abi_test "$B/testdata/demo_kimi"
run capi_cpp_wrapper .carry/bin/capi_cpp_wrapper_test --gtest_color=no
run abi_matches_cli bash tests/capi/abi_matches_cli_gpu.sh .carry/bin/capi_abi_test .carry/bin/strata \
  "$B/testdata/demo_kimi"
run sample_01_auto .carry/bin/sample_01_generate "$B/testdata/demo_kimi" --device auto 8 1 2 3
run agent_auto .carry/bin/strata-agent --question "What is 12.5 * 8 - 3?"
run cli_generate_cuda .carry/bin/strata generate --model tests/data/kimi_g1 --tokens tests/data/kimi_g1/prompt.npy \
  --max-new 8 --device cuda
exit $rc
