#!/usr/bin/env bash
# Configures and builds Strata into ./build (Release). Extra args go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
JOBS=${JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$JOBS"
