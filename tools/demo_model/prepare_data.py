#!/usr/bin/env python3
"""Tokenizes the generated data for train.py.

Conversations are rendered with the tokenizer's chat template through
transformers' apply_chat_template (the rendering Strata reproduces byte for
byte, see check_tokenizer.py); the loss mask covers what the assistant writes
(from after '<|im_start|>assistant\\n' through its '<|im_end|>'), not the
system prompt, tool schemas, user turns or tool results. Plain-text documents
are trained on entirely. Every document ends with <|endoftext|>.

Writes DIR/tokens.npy (uint16), DIR/mask.npy (uint8: 1 where the token is a
training target), DIR/starts.npy (int64 document starts) and DIR/stats.json.

Usage: python3 prepare_data.py --data DIR --tokenizer DIR --out DIR [--plain-fraction 0.25]
"""
import argparse
import json
import multiprocessing
import os
import random

import numpy as np
from transformers import PreTrainedTokenizerFast

ASSISTANT_OPEN = "<|im_start|>assistant\n"
END = "<|im_end|>"


def assistant_spans(text):
    """Character spans of what the assistant writes, its <|im_end|> included."""
    spans, pos = [], 0
    while True:
        a = text.find(ASSISTANT_OPEN, pos)
        if a < 0:
            return spans
        b = text.find(END, a)
        b = len(text) if b < 0 else b + len(END)
        spans.append((a + len(ASSISTANT_OPEN), b))
        pos = b


def encode_with_mask(tok, text, spans):
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, mask = enc["input_ids"], []
    for s, e in enc["offset_mapping"]:
        mask.append(int(any(a <= s and e <= b for a, b in spans) and e > s))
    return ids, mask


_TOK = None


def _init(tokenizer_dir):
    global _TOK
    _TOK = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)


def _conversation(line):
    c = json.loads(line)
    text = _TOK.apply_chat_template(c["messages"], tools=c["tools"], tokenize=False)
    ids, mask = encode_with_mask(_TOK, text, assistant_spans(text))
    eot = _TOK.convert_tokens_to_ids("<|endoftext|>")
    return ids + [eot], mask + [0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--plain-fraction", type=float, default=0.25,
                    help="share of plain-text tokens in the output (by tokens, at most what exists)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    args = ap.parse_args()
    tok = PreTrainedTokenizerFast.from_pretrained(args.tokenizer)
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    with open(os.path.join(args.data, f"{args.split}.jsonl")) as f:
        lines = f.readlines()
    # Rendering and tokenizing are independent per conversation; the output
    # order is the input order whatever the number of workers.
    with multiprocessing.Pool(args.workers, initializer=_init, initargs=(args.tokenizer,)) as pool:
        docs = pool.map(_conversation, lines, chunksize=64)
    conv_tokens = sum(len(ids) for ids, _ in docs)
    plain_budget = int(conv_tokens * args.plain_fraction / max(1e-9, 1 - args.plain_fraction))
    plain_tokens = 0
    with open(os.path.join(args.data, "plain.jsonl")) as f:
        for line in f:
            if plain_tokens >= plain_budget:
                break
            ids = tok(json.loads(line)["text"], add_special_tokens=False)["input_ids"] + [eot]
            docs.append((ids, [1] * len(ids)))
            plain_tokens += len(ids)
    random.Random(args.seed).shuffle(docs)
    tokens = np.fromiter((t for ids, _ in docs for t in ids), dtype=np.uint16)
    mask = np.fromiter((m for _, ms in docs for m in ms), dtype=np.uint8)
    starts = np.cumsum([0] + [len(ids) for ids, _ in docs[:-1]]).astype(np.int64)
    os.makedirs(args.out, exist_ok=True)
    np.save(os.path.join(args.out, "tokens.npy"), tokens)
    np.save(os.path.join(args.out, "mask.npy"), mask)
    np.save(os.path.join(args.out, "starts.npy"), starts)
    stats = {"documents": len(docs), "tokens": int(tokens.size), "conversation_tokens": conv_tokens,
             "plain_tokens": plain_tokens, "target_tokens": int(mask.sum()),
             "vocab": len(tok)}
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
