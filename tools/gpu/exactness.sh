#!/usr/bin/env bash
# Issue 6's exactness check on the GPU: the same 16 greedy prompts through
# `strata generate --prompts-jsonl` under serving schedules that must not change
# the output (batched, prefix cache, prefill chunk sizes, preemption), each
# compared token for token with the prompts run one at a time without the
# prefix cache. Kimi-Linear-48B shapes with dummy weights: their greedy margins
# are ~1e-6, so any rounding difference between schedules flips a token.
# Usage (device machine, from the repo root, binaries in .carry/bin):
#   tools/gpu/exactness.sh [MODE_FLAGS...]     e.g. --batch-invariant
#   MODEL_DIR=tests/data/qwen3next_a tools/gpu/exactness.sh --batch-invariant
#     (another model: prompt ids drawn below its config's vocab_size; PREEMPT_BUDGET=bytes
#     sets the preemption variant's memory budget, 600 MB by default)
# Prints one line per variant and exits 1 when any variant differs.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${STRATA_BIN:-.carry/bin/strata}
MODE=("$@")
W=$(mktemp -d)
if [ -n "${MODEL_DIR:-}" ]; then
  MODEL_ARGS=(--model "$MODEL_DIR")
  VOCAB=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$MODEL_DIR/config.json")
else
  MODEL_ARGS=(--preset kimi-linear-48b-a3b)
  VOCAB=163000
fi
python3 - "$W/prompts.jsonl" "$VOCAB" <<'PY'
import json, random, sys
rng = random.Random(20261130)
vocab = int(sys.argv[2])
shared = [rng.randrange(1, vocab) for _ in range(300)]
with open(sys.argv[1], "w") as f:
    for i in range(16):
        n = rng.randrange(40, 1000)
        p = (shared[:] if i % 2 == 0 else []) + [rng.randrange(1, vocab) for _ in range(n)]
        f.write(json.dumps(p) + "\n")
PY
run() {  # name, flags...
  local name=$1; shift
  timeout 240 "$BIN" generate "${MODEL_ARGS[@]}" --device cuda --prompts-jsonl "$W/prompts.jsonl" \
    --max-new 48 --ignore-eos "${MODE[@]}" "$@" > "$W/$name.out" 2> "$W/$name.err"
  echo "$name rc=$? $(tail -1 "$W/$name.err")" >> "$OUT/exactness_runs.txt"
}
run alone --concurrency 1 --no-prefix-cache
run again --concurrency 1 --no-prefix-cache
run c2 --concurrency 2 --no-prefix-cache
run c16 --concurrency 16 --no-prefix-cache
run cache --concurrency 1
run chunk97 --concurrency 1 --no-prefix-cache --prefill-chunk 97
run chunk128 --concurrency 1 --no-prefix-cache --prefill-chunk 128
run c16_cache_chunk97 --concurrency 16 --prefill-chunk 97
run c16_preempt --concurrency 16 --no-prefix-cache --memory-budget "${PREEMPT_BUDGET:-600000000}"
python3 - "$W" "${MODEL_ARGS[*]} ${MODE[*]:-default}" <<'PY' | tee -a "$OUT/exactness.txt"
import json, sys, os
w, mode = sys.argv[1], sys.argv[2]
def load(n):
    try:
        return [json.loads(l) for l in open(os.path.join(w, n + ".out"))]
    except Exception as e:
        return None
ref = load("alone")
bad = 0
print(f"mode: {mode}")
for n in ["again", "c2", "c16", "cache", "chunk97", "chunk128", "c16_cache_chunk97", "c16_preempt"]:
    o = load(n)
    if ref is None or o is None or len(o) != len(ref):
        print(f"{n:20s} no output"); bad += 1; continue
    same = sum(a == b for a, b in zip(ref, o))
    first = [(k, next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))))
             for k, (a, b) in enumerate(zip(ref, o)) if a != b]
    err = open(os.path.join(w, n + ".err")).read().strip().splitlines()
    print(f"{n:20s} identical {same}/{len(ref)}  differing (prompt, first token) {first[:6]}  | {err[-1] if err else ''}")
    bad += same != len(ref)
sys.exit(1 if bad else 0)
PY
