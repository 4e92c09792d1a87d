#!/usr/bin/env bash
# Packs the CUDA build's GPU test binaries, the strata CLI and the shared
# libraries they need (except the CUDA toolkit's own, present on the GPU
# machine) into .carry/ (git-ignored), for the device tool's `carry`.
# Usage: tools/gpu/pack.sh [BUILD_DIR]   (default build-cuda)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-cuda}
rm -rf .carry && mkdir -p .carry/bin .carry/lib
bins=$(find "$B/tests" -maxdepth 1 -type f -executable \( -name 'gpu_*' -o -name 'model_kimi_parity_test' \))
[ -x "$B/tools/strata" ] && bins="$bins $B/tools/strata"
for b in $bins $(find "$B/tools" -maxdepth 1 -type f -executable -name 'strata_bench*'); do
  strip -o ".carry/bin/$(basename "$b")" "$b"
done
for b in .carry/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}' | grep -E 'absl|pcre2|benchmark|gtest|gmock' || true
done | sort -u | while read -r lib; do cp -L "$lib" .carry/lib/; done
du -sh .carry
