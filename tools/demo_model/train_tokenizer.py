#!/usr/bin/env python3
"""Trains the demo model's byte-level BPE tokenizer (Hugging Face `tokenizers`)
on the generated conversations (rendered with chat_template.jinja) and the
plain text, and writes tokenizer.json + tokenizer_config.json.

Pre-tokenization is Qwen2's: a Split with its regex (single digits, so
numbers are copied digit by digit) followed by ByteLevel without its own
regex. Special tokens <|endoftext|>, <|im_start|>, <|im_end|>; the
tool-call markup <tool_call>, </tool_call>, <tool_response>,
</tool_response> are added tokens that decode as text (special: false), as
in Qwen's tokenizers, so Strata's Hermes parser sees them in the stream.

Usage: python3 train_tokenizer.py --data DIR --out DIR [--vocab 8000]
"""
import argparse
import json
import os

import jinja2
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MARKUP = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


def chat_template():
    with open(os.path.join(HERE, "chat_template.jinja")) as f:
        return f.read()


def renderer():
    """A jinja2 renderer close to transformers' (tojson without key sorting);
    only used to make BPE training text."""
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False)
    return env.from_string(chat_template())


def corpus(data_dir, limit):
    tmpl = renderer()
    n = 0
    with open(os.path.join(data_dir, "train.jsonl")) as f:
        for line in f:
            c = json.loads(line)
            yield tmpl.render(messages=c["messages"], tools=c["tools"],
                              add_generation_prompt=False)
            n += 1
            if n >= limit:
                break
    with open(os.path.join(data_dir, "plain.jsonl")) as f:
        for line in f:
            yield json.loads(line)["text"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--conversations", type=int, default=20000)
    args = ap.parse_args()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab - len(MARKUP), min_frequency=2, special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(args.data, args.conversations), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP])
    assert tok.get_vocab_size() <= args.vocab, tok.get_vocab_size()
    os.makedirs(args.out, exist_ok=True)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    decoder = {}
    for t in SPECIAL + MARKUP:
        decoder[str(tok.token_to_id(t))] = {
            "content": t, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": t in SPECIAL}
    config = {
        "add_bos_token": False, "add_eos_token": False, "added_tokens_decoder": decoder,
        "bos_token": None, "chat_template": chat_template(), "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "model_max_length": 4096,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{args.out}: vocab {tok.get_vocab_size()}; ids: " +
          ", ".join(f"{t}={tok.token_to_id(t)}" for t in SPECIAL + MARKUP))


if __name__ == "__main__":
    main()
