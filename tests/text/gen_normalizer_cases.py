#!/usr/bin/env python3
"""Reference cases for tests/unit/tokenizer_normalizer_live_test.cc: the
normalizers and decoders of tokenizer.json against the Hugging Face
`tokenizers` library (the reference), on synthetic tokenizer.json files this
script trains.

--mode normalizers writes, for each normalizer, its output on every code
point (only those it changes are listed) and on --count varied strings:

  {"mode": "normalizers", "sep": "\\ue000", "chunk": 4096}     header
  {"kind": "codepoints", "name", "normalizer": {...}, "changed": [[cp, out], ...]}
  {"kind": "strings", "name", "normalizer": {...}, "cases": [[text, out], ...]}

Code points are normalized in chunks of 4096, joined by U+E000 (which no
normalizer changes or combines with), as the C++ side does too.

--mode tokenizer --variant V trains a small BPE tokenizer.json in --workdir
(the variants are below) and writes, like gen_tokenizer_cases.py, one line per
string with the reference's ids and decodes, then one line per random id
sequence with its decodes:

  {"variant", "dir", "count", "seed"}                                  header
  {"text", "ids", "decode", "decode_skip", "slice", "slice_decode"}    x count
  {"rand_ids", "decode", "decode_skip"}                                x count/2

  python gen_normalizer_cases.py --mode tokenizer --variant nfkc_lower \\
      --count 5000 --workdir DIR --out F
"""
import argparse
import json
import os
import random
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_tokenizer_cases import Gen, random_assigned  # noqa: E402

SEP = "\ue000"
CHUNK = 4096

# Compatibility and case-sensitive text: ligatures, circled and full-width
# forms, half-width katakana, Turkish dotted/dotless i, Greek sigma,
# superscripts, fractions, Roman numerals, Hangul compatibility jamo, squared
# CJK, math alphanumerics, presentation forms, title case, special casing.
COMPAT = [
    "ﬁ", "ﬂ", "ﬀ", "ﬃ", "ﬄ", "ﬅ", "ﬆ", "①", "②", "⑳", "⑴", "⒜", "Ⓐ", "ⓩ", "㊀",
    "ｶ", "ｶﾞ", "ﾊﾟ", "ｱｲｳｴｵ", "ﾃﾞｰﾀ", "ＡＢＣ", "ａｂｃ", "１２３", "！？", "＠＃＄", "（ｘ）",
    "İ", "ı", "İSTANBUL", "ıŞık", "Iİıi", "ΟΔΥΣΣΕΥΣ", "Σ", "ΣΑΣ", "σς", "ἈΘῼ", "ᾈ", "ΐ",
    "²", "³", "¹", "⁴⁵", "₂", "½", "⅓", "¾", "⅞", "Ⅻ", "ⅻ", "Ⅸ", "ↂ", "ㄱㅏ", "ㅎㅏㄴ",
    "ㄱ", "ㅏ", "㍻", "㎏", "㎞", "㏄", "℃", "℉", "™", "℠", "№", "㈱", "㋿", "𝐀𝐁", "𝒜",
    "𝔄", "𝟘𝟙", "ﻻ", "ﷺ", "ﷻ", "ﺎ", "ǅ", "ǈ", "Ǳ", "ǲ", "ẞ", "ß", "ŉ", "ſ", "ϐ", "ϑ", "µ",
    "Ω", "K", "Å", "Ꭰ", "ꮰ", "Ა", "Ⴀ", "𐐀", "𐐨", "𞤀", "Ⓚ", "ǰ", "ΰ", "ﬓ", "Ａ\u0301",
    "\u00a0", "\u3000", "\u2002", "\u00ad", "\u200b", "…", "‥", "¨", "´", "¸", "˘", "ʰ",
    "ᵃ", "ꟲ", "𐞁", "\U00011935\U00011930", "\U00011938", "e\u0301", "A\u030a", "\u212b",
    "\u1e9b\u0323", "ḱ", "Ǆ", "ǆ", "ǉ", "ﾟ", "ﾞ", "ㆍ", "㉠", "㉮", "ⅰ", "ⅼ", "Ｋ", "Ｉ",
]


class NormGen(Gen):
    """gen_tokenizer_cases' strings plus compatibility and case fragments."""

    def __init__(self, seed, specials):
        super().__init__(seed, specials)
        r = random.Random(seed + 7)
        cps = [c for c in range(0xA0, 0x30000)
               if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)) not in ("Cn", "Cs", "Co")]
        self.compat_cps = [c for c in cps if unicodedata.decomposition(chr(c)).startswith("<")]
        self.cased = [c for c in cps if chr(c).lower() != chr(c) or chr(c).upper() != chr(c)]
        r.shuffle(self.compat_cps)

    def compat(self):
        r = self.r
        out = []
        for _ in range(r.randint(1, 6)):
            k = r.random()
            if k < 0.5:
                out.append(r.choice(COMPAT))
            elif k < 0.7:
                out.append(chr(r.choice(self.compat_cps)))
            elif k < 0.85:
                out.append(chr(r.choice(self.cased)))
            else:
                out.append(chr(r.choice(self.marks)))
            if r.random() < 0.3:
                out.append(r.choice([" ", "  ", "", "\n", "\t"]))
        return "".join(out)

    def fragment(self):
        if self.r.random() < 0.35:
            return self.compat()
        return super().fragment()


def norm_specs():
    """(name, normalizer JSON, in the code point test?)."""
    return [
        ("NFC", {"type": "NFC"}, True),
        ("NFD", {"type": "NFD"}, True),
        ("NFKC", {"type": "NFKC"}, True),
        ("NFKD", {"type": "NFKD"}, True),
        ("Lowercase", {"type": "Lowercase"}, True),
        ("StripAccents", {"type": "StripAccents"}, True),
        ("Nmt", {"type": "Nmt"}, True),
        ("ByteLevel", {"type": "ByteLevel"}, False),
        ("NFKC+Lowercase", {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}, False),
        ("NFD+StripAccents+Lowercase", {"type": "Sequence", "normalizers": [
            {"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"}]}, False),
        ("Nmt+NFKD+StripAccents", {"type": "Sequence", "normalizers": [
            {"type": "Nmt"}, {"type": "NFKD"}, {"type": "StripAccents"}]}, False),
        ("Lowercase+NFKC+Strip", {"type": "Sequence", "normalizers": [
            {"type": "Lowercase"}, {"type": "NFKC"},
            {"type": "Strip", "strip_left": True, "strip_right": True}]}, False),
        ("Prepend+Replace", {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}, False),
        ("ReplaceRegex", {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}, False),
    ]


def reference_normalizer(spec):
    from tokenizers import Tokenizer
    tj = {"version": "1.0", "added_tokens": [], "normalizer": spec, "pre_tokenizer": None,
          "post_processor": None, "decoder": None,
          "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}
    return Tokenizer.from_str(json.dumps(tj)).normalizer


def write_normalizers(a, out):
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000 and c != ord(SEP)]
    g = NormGen(a.seed, [])
    texts = [g.text() for _ in range(a.count)]
    out.write(json.dumps({"mode": "normalizers", "sep": SEP, "chunk": CHUNK}) + "\n")
    for name, spec, per_cp in norm_specs():
        n = reference_normalizer(spec)
        if per_cp:
            changed = []
            for k in range(0, len(cps), CHUNK):
                chunk = cps[k:k + CHUNK]
                res = n.normalize_str(SEP.join(chr(c) for c in chunk)).split(SEP)
                assert len(res) == len(chunk), (name, hex(chunk[0]))
                changed.extend([c, o] for c, o in zip(chunk, res) if o != chr(c))
            out.write(json.dumps({"kind": "codepoints", "name": name, "normalizer": spec,
                                  "changed": changed}, ensure_ascii=False) + "\n")
        cases = [[t, n.normalize_str(t)] for t in texts]
        out.write(json.dumps({"kind": "strings", "name": name, "normalizer": spec,
                              "cases": cases}, ensure_ascii=False) + "\n")


# --- tokenizers ---------------------------------------------------------------

META = "\u2581"
LLAMA_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": META}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
BOS_TEMPLATE = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "<s>", "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}

# variant -> (normalizer, pre_tokenizer, decoder, post_processor); all but
# nfkc_lower share one sentencepiece-style BPE with byte fallback.
VARIANTS = {
    # Byte-level BPE trained on NFKC + Lowercase text.
    "nfkc_lower": None,
    # Mistral / Llama-2 (legacy=False) style: Metaspace pre-tokenizer that
    # prepends only at the start of the text, no split.
    "metaspace_first": (None,
                        {"type": "Metaspace", "replacement": META, "prepend_scheme": "first",
                         "split": False},
                        LLAMA_DECODER, BOS_TEMPLATE),
    # Llama-2 (legacy) style: Prepend + Replace normalizers, no pre-tokenizer.
    "llama_legacy": ({"type": "Sequence", "normalizers": [
                          {"type": "Prepend", "prepend": META},
                          {"type": "Replace", "pattern": {"String": " "}, "content": META}]},
                     None, LLAMA_DECODER, BOS_TEMPLATE),
    # Metaspace split into words, always prepended, Metaspace decoder, text
    # folded by Nmt + NFKD + StripAccents + Lowercase.
    "metaspace_always_nfkd": ({"type": "Sequence", "normalizers": [
                                   {"type": "Nmt"}, {"type": "NFKD"}, {"type": "StripAccents"},
                                   {"type": "Lowercase"}]},
                              {"type": "Metaspace", "replacement": META,
                               "prepend_scheme": "always", "split": True},
                              {"type": "Metaspace", "replacement": META,
                               "prepend_scheme": "always", "split": True},
                              None),
}


def corpus(seed, n):
    g = NormGen(seed, [])
    return [g.text() for _ in range(n)]


def train_nfkc_lower(workdir, seed):
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(seed, 20000), trainer=trainer)
    # Added tokens: a normalized one written in full-width capitals (it
    # matches its NFKC + Lowercase form), and a non-normalized one.
    tok.add_tokens([AddedToken("ＴＯＫＥＮ", normalized=True), AddedToken("<Raw>", normalized=False)])
    tok.add_special_tokens(["<|im_start|>"])
    path = os.path.join(workdir, "tokenizer.json")
    tok.save(path)
    with open(os.path.join(workdir, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": False, "eos_token": "<|endoftext|>"}, f)
    return ["<|endoftext|>", "<|pad|>", "<|im_start|>", "ＴＯＫＥＮ", "token", "<Raw>", "<raw>"]


def train_sentencepiece_style(workdir, seed, variant):
    """A BPE over Metaspace pieces with a small alphabet, renumbered the way
    Llama's is (<unk> <s> </s>, then <0x00>..<0xFF>, then the rest) and given
    byte_fallback and fuse_unk."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=META, prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=4000, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=400, show_progress=False)
    tok.train_from_iterator(corpus(seed, 20000), trainer=trainer)
    trained = json.loads(tok.to_str())
    old_vocab = trained["model"]["vocab"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for t, _ in sorted(old_vocab.items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    normalizer, pre, decoder, post = VARIANTS[variant]
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
          "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": post,
          "decoder": decoder,
          "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                    "continuing_subword_prefix": None, "end_of_word_suffix": None,
                    "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                    "vocab": vocab, "merges": trained["model"]["merges"]}}
    with open(os.path.join(workdir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    cfg = {"add_bos_token": post is None, "add_eos_token": False, "bos_token": "<s>",
           "eos_token": "</s>", "unk_token": "<unk>"}
    with open(os.path.join(workdir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)
    return ["<unk>", "<s>", "</s>", "<0x41>", META, "\u2581\u2581"]


def write_tokenizer(a, out):
    from tokenizers import Tokenizer
    if a.variant == "nfkc_lower":
        specials = train_nfkc_lower(a.workdir, a.seed)
    else:
        specials = train_sentencepiece_style(a.workdir, a.seed, a.variant)
    tok = Tokenizer.from_file(os.path.join(a.workdir, "tokenizer.json"))
    with open(os.path.join(a.workdir, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    bos_id = tok.token_to_id(cfg["bos_token"]) if cfg.get("add_bos_token") else None
    out.write(json.dumps({"variant": a.variant, "dir": a.workdir, "count": a.count,
                          "seed": a.seed}) + "\n")
    g = NormGen(a.seed + 100, specials)
    r = random.Random(a.seed + 1)
    texts = []
    for i in range(a.count):
        t = g.text()
        if i % 7 == 0:
            t = r.choice([" ", "  ", "\n", ""]) + t  # leading whitespace
        if i % 11 == 0:
            t = r.choice(specials) + t  # an added token first
        texts.append(t)
    all_ids = []
    for e in tok.encode_batch(texts):
        ids = e.ids
        if bos_id is not None:
            ids = [bos_id] + ids
        all_ids.append(ids)
    slices = []
    for ids in all_ids:
        a0 = r.randint(0, len(ids))
        slices.append((a0, r.randint(a0, len(ids))))
    dec = tok.decode_batch(all_ids, skip_special_tokens=False)
    dec_skip = tok.decode_batch(all_ids, skip_special_tokens=True)
    dec_slice = tok.decode_batch([ids[x:y] for ids, (x, y) in zip(all_ids, slices)],
                                 skip_special_tokens=False)
    for i, s in enumerate(texts):
        rec = {"text": s, "ids": all_ids[i], "decode": dec[i], "decode_skip": dec_skip[i],
               "slice": list(slices[i]), "slice_decode": dec_slice[i]}
        out.write(json.dumps(rec, ensure_ascii=False) + "\n")
    # Random id sequences: lone and broken <0xNN> runs, tokens with several
    # replacement characters first, specials anywhere.
    size = tok.get_vocab_size(with_added_tokens=True)
    byte_ids = [i for t, i in tok.get_vocab().items() if t.startswith("<0x")]
    rand = []
    for _ in range(a.count // 2):
        seq = []
        for _ in range(r.randint(0, 12)):
            k = r.random()
            if k < 0.3 and byte_ids:
                seq.append(r.choice(byte_ids))
            elif k < 0.4:
                seq.append(r.randint(0, 3))
            else:
                seq.append(r.randrange(size))
        rand.append(seq)
    rdec = tok.decode_batch(rand, skip_special_tokens=False)
    rdec_skip = tok.decode_batch(rand, skip_special_tokens=True)
    for seq, d, ds in zip(rand, rdec, rdec_skip):
        out.write(json.dumps({"rand_ids": seq, "decode": d, "decode_skip": ds},
                             ensure_ascii=False) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True, choices=["normalizers", "tokenizer"])
    ap.add_argument("--variant", choices=sorted(VARIANTS))
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--workdir")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(a.out, "w", encoding="utf-8") as out:
        if a.mode == "normalizers":
            write_normalizers(a, out)
        else:
            write_tokenizer(a, out)


if __name__ == "__main__":
    main()
