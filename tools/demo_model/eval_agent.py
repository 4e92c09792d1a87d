#!/usr/bin/env python3
"""Evaluates the shipped pipeline: the real `strata-agent` binary (C ABI, Strata's
chat template renderer, tool-call parser and tool loop, the C tools) on the
first user turn of held-out conversations. Each question runs as
`strata-agent --model M --sandbox S --question Q`, with S holding that
conversation's sandbox files. From the output it reads the printed tool calls
("[tool] NAME ARGS -> RESULT") and the answer after them, and it reports:
  format_valid  printed calls / (printed calls + "[tool error]" lines)
  right_calls   the calls equal the expected ones (name and canonical arguments, in order)
  answer_right  the answer contains the expected string (the exact calculator result, ...)
split by the first expected tool. CPU only, and no torch needed.

Usage: python3 eval_agent.py --agent build/samples/strata-agent --model DIR --data DATA
       [--limit 100] [--json R.json]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tools as T  # noqa: E402

TOOL_LINE = re.compile(r"^\[tool\] (\S+) (\{.*?\}) -> ", re.M)
# The agent prints "[tool error] ..." when the parser rejects a call block
# (malformed JSON, missing name, unknown tool): the format-validity failures.
TOOL_ERROR_LINE = re.compile(r"^\[tool error\] ", re.M)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--json", default="")
    ap.add_argument("--show", type=int, default=3, help="print this many transcripts")
    args = ap.parse_args()
    convs = [json.loads(l) for l in open(os.path.join(args.data, "eval.jsonl"))][: args.limit]
    stats = collections.defaultdict(lambda: [0, 0, 0])
    shown = 0
    blocks = valid = 0
    for c in convs:
        exp = c["expect"][0]
        with tempfile.TemporaryDirectory() as box:
            for path, text in c.get("files", {}).items():
                os.makedirs(os.path.dirname(os.path.join(box, path)), exist_ok=True)
                with open(os.path.join(box, path), "w") as f:
                    f.write(text)
            run = subprocess.run([args.agent, "--model", args.model, "--sandbox", box,
                                  "--question", exp["user"]], capture_output=True, timeout=600)
        out = run.stdout.decode("utf-8", "replace")
        made = [{"name": m.group(1),
                 "arguments": T.canonical_args(json.loads(m.group(2)))}
                for m in TOOL_LINE.finditer(out)]
        # The answer is what follows the last tool result's line.
        tail = out
        if made:
            last = list(TOOL_LINE.finditer(out))[-1]
            tail = out[last.end():]
            tail = tail.split("\n", 1)[1] if "\n" in tail else ""
        errors = len(TOOL_ERROR_LINE.findall(out))
        blocks += len(made) + errors
        valid += len(made)
        kind = exp["calls"][0]["name"] if exp["calls"] else "no_tool"
        s = stats[kind]
        s[0] += 1
        s[1] += made == exp["calls"]
        s[2] += exp["answer_contains"] is not None and exp["answer_contains"] in tail
        if shown < args.show:
            shown += 1
            print(f"$ strata-agent --question {exp['user']!r}\n{out}(exit {run.returncode})\n")
    turns = sum(v[0] for v in stats.values())
    report = {"questions": turns,
              "format_valid": valid / blocks if blocks else None, "tool_call_blocks": blocks,
              "right_calls": sum(v[1] for v in stats.values()) / turns,
              "answer_right": sum(v[2] for v in stats.values()) / turns,
              "by_first_tool": {k: {"questions": v[0], "right_calls": v[1] / v[0],
                                    "answer_right": v[2] / v[0]} for k, v in sorted(stats.items())}}
    print(json.dumps(report, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
