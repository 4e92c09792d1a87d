#!/usr/bin/env bash
# Builds the serving stress test (tests/capi/stress_test.c: 64 sessions from
# 8 host threads through the C ABI) and the engine's unit tests with a
# sanitizer, then runs them; with address, also the Python binding's test
# against the ASan libstrata (ctest preloads the ASan runtime into python, see
# bindings/python/CMakeLists.txt). Usage:
#   tools/sanitize.sh thread|address [ROUNDS]     (build dirs build-tsan / build-asan)
# Environment: JOBS (default 2), BUILD_DIR (default build-tsan / build-asan).
# Exits non-zero on any sanitizer report (halt_on_error) or test failure.
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-}"
rounds="${2:-12}"
case "$kind" in
  thread) flags=thread; dir="${BUILD_DIR:-build-tsan}" ;;
  address) flags=address,undefined; dir="${BUILD_DIR:-build-asan}" ;;
  *) echo "usage: tools/sanitize.sh thread|address [ROUNDS]" >&2; exit 2 ;;
esac
jobs="${JOBS:-2}"
cmake -S . -B "$dir" -G Ninja -DSTRATA_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTRATA_SANITIZE="$flags" -DSTRATA_BUILD_BENCHMARKS=OFF -DSTRATA_BUILD_SAMPLES=OFF >/dev/null
targets=(capi_make_demo_model capi_stress_test capi_serving_api_test unit_scheduler_test unit_serving_test
         unit_engine_test)
[ "$kind" = address ] && targets+=(strata)
cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
model="$dir/testdata/demo_kimi"
"$dir/tests/capi_make_demo_model" "$model"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
export ASAN_OPTIONS="halt_on_error=1 detect_leaks=1 ${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 ${UBSAN_OPTIONS:-}"
echo "== stress test ($kind, $rounds rounds)"
"$dir/tests/capi_stress_test" "$model" "$rounds"
echo "== C ABI serving test ($kind)"
"$dir/tests/capi_serving_api_test" "$model"
for t in unit_scheduler_test unit_serving_test unit_engine_test; do
  echo "== $t ($kind)"
  "$dir/tests/$t" --gtest_brief=1
done
if [ "$kind" = address ]; then
  echo "== Python binding ($kind)"
  ctest --test-dir "$dir" -R '^bindings_python' --output-on-failure
fi
echo "sanitize.sh: $kind clean"
