#!/usr/bin/env python3
"""Checks that Strata reads the demo tokenizer exactly as transformers does:
for conversations of a data file, `strata template` renders byte for byte what
transformers' apply_chat_template renders, and `strata tokenize` gives the same
ids as the `tokenizers` library on those renderings and on plain text.

Usage: python3 check_tokenizer.py --tokenizer DIR --data DIR --strata BUILD/tools/strata [--n 50]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from transformers import PreTrainedTokenizerFast


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--strata", required=True)
    ap.add_argument("--n", type=int, default=50)
    args = ap.parse_args()
    tok = PreTrainedTokenizerFast.from_pretrained(args.tokenizer)
    convs = [json.loads(l) for l in open(os.path.join(args.data, "eval.jsonl"))][: args.n]
    plain = [json.loads(l)["text"] for l in open(os.path.join(args.data, "plain.jsonl"))][:20]
    texts, bad = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, c in enumerate(convs):
            for gen in (False, True):
                msgs = c["messages"] if not gen else c["messages"][:2]
                want = tok.apply_chat_template(msgs, tools=c["tools"], tokenize=False,
                                               add_generation_prompt=gen)
                path = os.path.join(tmp, "conv.json")
                with open(path, "w") as f:
                    json.dump({"messages": msgs, "tools": c["tools"],
                               "add_generation_prompt": gen}, f, ensure_ascii=False)
                got = subprocess.run([args.strata, "template", "--model", args.tokenizer,
                                      "--conversation", path], capture_output=True,
                                     check=True).stdout.decode()
                if got != want:
                    bad += 1
                    if bad <= 3:
                        print(f"template mismatch, conversation {i}:\n--- transformers\n{want!r}"
                              f"\n--- strata\n{got!r}")
                texts.append(want)
        texts += plain
        path = os.path.join(tmp, "texts.jsonl")
        with open(path, "w") as f:
            for t in texts:
                f.write(json.dumps(t, ensure_ascii=False) + "\n")
        out = subprocess.run([args.strata, "tokenize", "--model", args.tokenizer, "--jsonl", path,
                              "--no-special"], capture_output=True, check=True).stdout.decode()
    ids = [json.loads(l) for l in out.splitlines()]
    tok_bad = sum(tok.encode(t, add_special_tokens=False) != i for t, i in zip(texts, ids))
    n_tok = sum(len(i) for i in ids)
    print(f"templates: {2 * len(convs) - bad}/{2 * len(convs)} identical; "
          f"tokenization: {len(texts) - tok_bad}/{len(texts)} identical ({n_tok} tokens)")
    return 1 if bad or tok_bad or len(ids) != len(texts) else 0


if __name__ == "__main__":
    sys.exit(main())
