#!/usr/bin/env python3
"""Times the reference tokenizers on the bench corpus (make_bench_corpus.py),
single-threaded: one encode() call per document, RAYON_NUM_THREADS=1, no
encode_batch. Prints MB/s and tokens/s per vocabulary (best of --repeat).

  RAYON_NUM_THREADS=1 python time_reference.py --data DIR --corpus F
"""
import argparse
import base64
import json
import os
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--vocab", nargs="*", default=["qwen3", "deepseek_v3", "o200k_base", "cl100k_base"])
    a = ap.parse_args()
    with open(a.corpus, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    for vocab in a.vocab:
        if vocab.endswith("_base"):
            import tiktoken
            import tiktoken_ext.openai_public as pub
            pub.load_tiktoken_bpe = lambda *x, **k: {}
            spec = getattr(pub, vocab)()
            ranks = {}
            with open(f"{a.data}/tiktoken/{vocab}.tiktoken", "rb") as f:
                for line in f:
                    if line.strip():
                        t, rk = line.split()
                        ranks[base64.b64decode(t)] = int(rk)
            enc = tiktoken.Encoding(vocab, pat_str=spec["pat_str"], mergeable_ranks=ranks,
                                    special_tokens=spec["special_tokens"])
            encode = lambda d: enc.encode(d, allowed_special="all")  # noqa: E731
            lib = "tiktoken " + tiktoken.__version__
        else:
            import tokenizers
            tok = tokenizers.Tokenizer.from_file(f"{a.data}/tokenizers/{vocab}/tokenizer.json")
            encode = lambda d: tok.encode(d).ids  # noqa: E731
            lib = "tokenizers " + tokenizers.__version__
        best = None
        best_cpu = None
        ntok = 0
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            c0 = time.process_time()
            ntok = 0
            for d in docs:
                ntok += len(encode(d))
            dt = time.perf_counter() - t0
            dc = time.process_time() - c0
            best = dt if best is None else min(best, dt)
            best_cpu = dc if best_cpu is None else min(best_cpu, dc)
        print(f"{vocab} ({lib}): {nbytes / best / 1e6:.2f} MB/s, {ntok / best / 1e6:.3f} Mtok/s, "
              f"{ntok} tokens, {best:.2f} s wall, {best_cpu:.2f} s CPU")


if __name__ == "__main__":
    main()
