#!/usr/bin/env bash
# The whole test suite: install dependencies, build everything (CUDA code too
# when nvcc exists), run every CPU test. GPU tests (label gpu) run on a GPU
# machine with `ctest --test-dir build -L gpu`.
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
