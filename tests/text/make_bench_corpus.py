#!/usr/bin/env python3
"""Writes the deterministic ~10 MB mixed corpus for the tokenizer speed
comparison: JSONL, one document (a JSON string of ~4 KB) per line. Mix by
bytes: English-like prose, code, Chinese/Japanese/Korean, other scripts,
and the varied strings of gen_tokenizer_cases.py (emoji, digits, whitespace,
random Unicode).

  python make_bench_corpus.py --out /tmp/corpus.jsonl [--mb 10]
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tokenizer_cases as cases  # noqa: E402

ENGLISH = ("the of and to in is was for on that with as by at from his her it an were are "
           "which this be or has had not but first one their its new after who they two "
           "have more other been also into all time can year during only over most some "
           "city world people system between state government model language tokenizer "
           "inference stream memory process number work three known school national under "
           "university because while where before through however several american history "
           "company team including later john music united since group part would found").split()


def prose(r):
    words = []
    for _ in range(r.randint(8, 30)):
        w = r.choice(ENGLISH)
        words.append(w.capitalize() if not words else w)
    return " ".join(words) + r.choice([". ", ", ", "! ", "? ", ".\n", ".\n\n"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=99)
    a = ap.parse_args()
    r = random.Random(a.seed)
    g = cases.Gen(a.seed, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    target = int(a.mb * 1_000_000)
    total = 0
    with open(a.out, "w", encoding="utf-8") as out:
        while total < target:
            doc = []
            size = 0
            while size < 4000:
                k = r.random()
                if k < 0.55:
                    s = prose(r)
                elif k < 0.70:
                    s = r.choice(cases.CODE)
                elif k < 0.80:
                    lang = r.choice(["zh", "ja", "ko"])
                    s = "".join(r.choice(cases.WORDS[lang]) for _ in range(r.randint(5, 20))) + "。"
                elif k < 0.90:
                    s = g.words() + " "
                else:
                    s = g.text()
                doc.append(s)
                size += len(s.encode("utf-8"))
            text = "".join(doc)
            out.write(json.dumps(text, ensure_ascii=False) + "\n")
            total += len(text.encode("utf-8"))
    print(f"{a.out}: {total} bytes")


if __name__ == "__main__":
    main()
