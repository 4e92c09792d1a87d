#!/usr/bin/env bash
# Builds Strata and runs the main job (`strata run`) on the embedded default model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
./build/tools/strata run "$@"
