#!/usr/bin/env bash
# The whole test suite: install dependencies, build everything (CUDA code too
# when nvcc exists), run every CPU test. GPU tests (label gpu) run on a GPU
# machine with `ctest --test-dir build -L gpu`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE gpu
