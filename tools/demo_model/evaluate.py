#!/usr/bin/env python3
"""Evaluates a trained demo model on the held-out generated conversations.

For every user turn of every eval conversation (gen_data.py's eval.jsonl;
earlier turns are the reference transcript), the model answers greedily from
the rendered conversation: when it writes tool calls they are parsed, run with
the reference tools (tools.py, on the conversation's sandbox), their results
appended, and the model continues, up to --max-rounds rounds. Reported:
  format_valid   tool-call blocks that are a JSON object with a string
                 "name" and an object "arguments" (of all blocks written)
  right_calls    tool turns whose calls equal the expected ones (name and
                 canonical arguments, in order); no-tool turns count when the
                 model makes no call
  answer_right   turns whose final answer contains the expected string
                 (the exact calculator result, element number, file text...)
and the same split by the first tool of the turn. --transcripts N writes N
full transcripts (prompt text and everything generated) for the docs.

Generation recomputes the whole prefix for every token (no cache), so keep
--limit modest on a CPU.

Usage: python3 evaluate.py --model OUT/model --data DATA [--limit 300] [--json R.json]
"""
import argparse
import collections
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_hybrid as sh  # noqa: E402
import tools as T  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def parse_calls(text):
    """[(ok, name, arguments dict or None)] for every <tool_call> block, and
    the text outside them. An unterminated block counts as invalid."""
    calls = []
    for body in CALL_RE.findall(text):
        try:
            obj = json.loads(body)
            ok = (isinstance(obj, dict) and isinstance(obj.get("name"), str)
                  and isinstance(obj.get("arguments"), dict))
        except json.JSONDecodeError:
            ok, obj = False, None
        calls.append((ok, obj.get("name") if ok else None, obj.get("arguments") if ok else None))
    rest = CALL_RE.sub("", text)
    if "<tool_call>" in rest:
        calls.append((False, None, None))
        rest = rest.split("<tool_call>")[0]
    return calls, rest.strip()


def oracle_text(message):
    """What the template renders for a reference assistant message."""
    calls = ['<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
             % (c["function"]["name"], json.dumps(c["function"]["arguments"], ensure_ascii=False))
             for c in message.get("tool_calls", [])]
    return "\n".join(([message["content"]] if message["content"] else []) + calls)


@torch.no_grad()
def generate(model, tok, prompt_ids, max_new, stop_id, device):
    ids = list(prompt_ids)
    out = []
    for _ in range(max_new):
        x = torch.tensor([ids], device=device)
        logits = model(x)[0, -1]
        t = int(logits.argmax())
        if t == stop_id:
            break
        out.append(t)
        ids.append(t)
    return tok.decode(out, skip_special_tokens=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="Strata model directory written by train.py")
    ap.add_argument("--data", required=True, help="gen_data.py output (eval.jsonl)")
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--max-new", type=int, default=160)
    ap.add_argument("--max-rounds", type=int, default=4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", default="")
    ap.add_argument("--transcripts", type=int, default=0)
    ap.add_argument("--transcripts-out", default="")
    ap.add_argument("--oracle", action="store_true",
                    help="answer with the reference transcript instead of the model (checks "
                         "the scoring: every rate must come out 1.0)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    model = None if args.oracle else sh.load_checkpoint(args.model, dtype=torch.float32,
                                                        device=dev).eval()
    tok = PreTrainedTokenizerFast.from_pretrained(args.model)
    stop = tok.convert_tokens_to_ids("<|im_end|>")
    convs = [json.loads(l) for l in open(os.path.join(args.data, "eval.jsonl"))][: args.limit]

    blocks = valid = 0
    turns = right = answered = 0
    by_kind = collections.defaultdict(lambda: [0, 0, 0])  # turns, right calls, right answers
    transcripts = []
    for ci, c in enumerate(convs):
        msgs = c["messages"]
        # Reference history: everything before each user turn.
        user_idx = [i for i, m in enumerate(msgs) if m["role"] == "user"]
        for ti, ui in enumerate(user_idx):
            exp = c["expect"][ti]
            conv = list(msgs[: ui + 1])
            made, final, log = [], "", []
            # The reference assistant messages of this turn, for --oracle.
            ref = iter([m for m in msgs[ui + 1: user_idx[ti + 1] if ti + 1 < len(user_idx)
                                        else len(msgs)] if m["role"] == "assistant"])
            for _ in range(args.max_rounds):
                prompt = tok.apply_chat_template(conv, tools=c["tools"], tokenize=False,
                                                 add_generation_prompt=True)
                ids = tok(prompt, add_special_tokens=False)["input_ids"]
                text = (oracle_text(next(ref)) if args.oracle
                        else generate(model, tok, ids, args.max_new, stop, dev))
                log.append(text)
                calls, rest = parse_calls(text)
                blocks += len(calls)
                valid += sum(ok for ok, _, _ in calls)
                good = [(n, a) for ok, n, a in calls if ok]
                if not calls:
                    final = rest
                    break
                conv.append({"role": "assistant", "content": rest,
                             "tool_calls": [{"type": "function",
                                             "function": {"name": n, "arguments": a}}
                                            for n, a in good]})
                for n, a in good:
                    made.append({"name": n, "arguments": T.canonical_args(a)})
                    res = T.run_tool(n, a, c.get("files", {}))
                    log.append(f"[{n} -> {res}]")
                    conv.append({"role": "tool", "name": n, "content": res})
                if len(good) < len(calls):
                    break
            kind = exp["calls"][0]["name"] if exp["calls"] else "no_tool"
            ok_calls = made == exp["calls"]
            ok_answer = exp["answer_contains"] is not None and exp["answer_contains"] in final
            turns += 1
            right += ok_calls
            answered += ok_answer
            k = by_kind[kind]
            k[0] += 1
            k[1] += ok_calls
            k[2] += ok_answer
            if len(transcripts) < args.transcripts:
                transcripts.append({"user": exp["user"], "generated": log,
                                    "expected_calls": exp["calls"],
                                    "expected_in_answer": exp["answer_contains"],
                                    "calls_right": ok_calls, "answer_right": ok_answer})
        if (ci + 1) % 50 == 0:
            print(f"{ci + 1} conversations: answer_right {answered / turns:.3f}", flush=True)
    report = {
        "conversations": len(convs), "turns": turns,
        "format_valid": valid / blocks if blocks else None, "tool_call_blocks": blocks,
        "right_calls": right / turns, "answer_right": answered / turns,
        "by_first_tool": {k: {"turns": v[0], "right_calls": v[1] / v[0],
                              "answer_right": v[2] / v[0]} for k, v in sorted(by_kind.items())},
    }
    print(json.dumps(report, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.transcripts_out:
        with open(args.transcripts_out, "w") as f:
            json.dump(transcripts, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
