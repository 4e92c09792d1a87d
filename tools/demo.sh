#!/usr/bin/env bash
# Builds Strata and runs the main job: the sample agent app (samples/agent,
# C ABI only) on the embedded default model, models/strata-demo (trained by the
# project; no download). Each answer prints its tool calls as they run, then
# the answer. Arguments, if any, go to strata-agent instead of the two sample
# questions (e.g. `bash tools/demo.sh --question "What is 3.5 * 12?"`, or
# `bash tools/demo.sh --sandbox DIR` for an interactive chat).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
agent=./build/samples/strata-agent
if [ $# -gt 0 ]; then
  exec "$agent" "$@"
fi
for q in "What is 12.5 * 8 - 3?" "What is in the file notes/plan.txt?"; do
  echo "\$ strata-agent --sandbox samples/agent/sandbox --question \"$q\""
  "$agent" --sandbox samples/agent/sandbox --question "$q"
  echo
done
echo "\$ strata run   # the same model through the strata tool: tokens/s, then a chat turn"
./build/tools/strata run
