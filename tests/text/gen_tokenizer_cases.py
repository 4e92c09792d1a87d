#!/usr/bin/env python3
"""Reference cases for the tokenizer live test (tests/unit/tokenizer_live_test.cc).

Generates varied strings (many scripts, code, emoji ZWJ sequences and flags,
whitespace/newline runs, digit runs, special-token literals inside text,
random Unicode with combining marks) from a fixed seed and writes one JSON
object per line with the reference library's ids and decodes:

  {"text": ..., "ids": [...], "decode": ..., "decode_skip": ...,
   "slice": [a, b], "slice_decode": ...}

The first line is a header: {"vocab", "kind", "count", "seed", and for
tiktoken "pattern" and "specials"}.

References: Hugging Face `tokenizers` (Tokenizer.from_file) plus the BOS/EOS
that tokenizer_config.json asks for; `tiktoken` for the .tiktoken rank files.

  python gen_tokenizer_cases.py --data DIR --vocab qwen3 --count 20000 --out F
"""
import argparse
import base64
import json
import random
import sys
import unicodedata

WORDS = {
    "en": "the quick brown fox jumps over lazy dog I'm we're they'll DON'T she'd it's You've HELLO World tokenizer inference streaming".split(),
    "zh": "我们 今天 天气 很好 模型 推理 中文 分词 测试 人工智能 北京 上海 你好 世界 的 是 了".split(),
    "ja": "こんにちは 世界 トークナイザー テスト ひらがな カタカナ 東京 日本語 です ます".split(),
    "ko": "안녕하세요 세계 토크나이저 테스트 한국어 서울 감사합니다 입니다".split(),
    "ar": "مرحبا بالعالم هذا اختبار اللغة العربية كتاب مدرسة".split(),
    "he": "שלום עולם זה מבחן עברית".split(),
    "hi": "नमस्ते दुनिया यह परीक्षण है हिन्दी भाषा क्षत्रिय".split(),
    "th": "สวัสดีครับ ภาษาไทย ทดสอบ โลก กรุงเทพมหานคร".split(),
    "ru": "Привет мир это тест русский язык Москва ЁЖИК ёлка".split(),
    "el": "Γειά σου κόσμε ελληνικά δοκιμή ΑΘΗΝΑ".split(),
    "vi": "Xin chào thế giới tiếng Việt kiểm tra Hà Nội".split(),
    "ta": "வணக்கம் உலகம் தமிழ் சோதனை".split(),
    "bn": "হ্যালো বিশ্ব বাংলা পরীক্ষা".split(),
    "hy": "Բարեւ աշխարհ հայերեն".split(),
    "ka": "გამარჯობა მსოფლიო ქართული".split(),
    "tr": "Merhaba dünya İstanbul ığdır ŞEKER".split(),
    "de": "Straße Größe Übermäßig ÄÖÜ äöü ß".split(),
}

CODE = [
    "def f(x):\n    return x * 2  # double\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    '{"key": [1, 2.5, -3e10], "nested": {"a": null, "b": true}}',
    "<div class=\"main\"><p>Hello &amp; welcome</p></div>",
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%o''k%';",
    "fn main() { println!(\"{}\", x.unwrap_or_default()); }",
    "#include <vector>\nint main(){return 0;}\r\n",
    "x = lambda a, b: a**b // 3 if a != b else ~a ^ b",
    "    \n\n        if (!ok) return -1;\n",
    "$ echo \"$HOME\" | grep -E '^/h' && ls -la ~/.config",
    "/* comment */ a->b = c ? d : e; // done",
    "import numpy as np\narr = np.zeros((3, 4), dtype=np.float32)",
]

EMOJI = [
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵🇫🇷", "1️⃣", "❤️", "🧑🏿‍💻", "👩‍❤️‍💋‍👨",
    "🐈‍⬛", "✊🏾", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "☺︎", "🤷‍♀️", "🫠", "🥲", "⌚", "©️", "🀄",
]

SPACES = [" ", "  ", "\t", "\n", "\r\n", "\n\n", "\u00a0", "\u3000", "\u0085", "\u2028",
          "\u2029", "\u200b", "\u202f", "\u2009", "\r", "\x0b", "\x0c", " \n ", "\t\t\n"]

DIGITS = ["0", "7", "42", "123", "1234", "12345678901234567890", "3.14159", "-0.5e-10",
          "1,000,000", "٣٤٥", "१२३", "１２３", "²³", "½", "Ⅻ", "0x1F", "2024-01-01"]

PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["...", "—", "–", "“", "”", "«", "»",
                                                       "。", "、", "！", "？", "・", "¿", "¡",
                                                       "'s", "'S", "'ll", "'ſ", "'T"]

COMBINING = [chr(c) for c in range(0x300, 0x370)] + ["\u0e31", "\u093f", "\u0951", "\u20dd",
                                                     "\u1dc0", "\ufe20", "\u0670"]

# Strings NFC changes: decomposed Latin, Hangul jamo, singletons, reordering.
NFC_CASES = ["e\u0301", "A\u030a", "o\u0308\u0304", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab",
             "\u212b", "\u2126", "a\u0328\u0301", "a\u0301\u0328", "\u0958", "s\u0323\u0307",
             "\uf900", "\u0344", "\u1e9b\u0323", "\u0041\u0300\u0301", "\u00c5\u0300",
             "\u0d46\u0d3e", "\u0b47\u0b3e", "\u09c7\u09be", "\u1025\u102e", "\u3099\u304b",
             "\u304b\u3099", "\u30cf\u309a", "\U000110a5\U000110ba", "\U00011131\U00011127"]


def random_assigned(r, categories=None):
    """A random assigned code point (Unicode 14, no surrogates/private use),
    optionally of the given general categories, by rejection sampling."""
    while True:
        c = r.randint(0x20, 0x10FFFF) if r.random() < 0.5 else r.randint(0x20, 0xFFFF)
        if 0xD800 <= c < 0xE000:
            continue
        cat = unicodedata.category(chr(c))
        if cat in ("Cn", "Cs", "Co"):
            continue
        if categories and cat not in categories:
            continue
        return c


class Gen:
    def __init__(self, seed, specials):
        self.r = random.Random(seed)
        self.specials = specials
        # Combining marks of the first two planes (where nearly all are).
        self.marks = [c for c in range(0x300, 0x20000)
                      if unicodedata.category(chr(c)) in ("Mn", "Mc", "Me")]

    def words(self):
        r = self.r
        lang = r.choice(list(WORDS))
        n = r.randint(1, 12)
        sep = "" if lang in ("zh", "ja", "th") and r.random() < 0.6 else " "
        s = sep.join(r.choice(WORDS[lang]) for _ in range(n))
        if r.random() < 0.3:
            s = s.upper() if r.random() < 0.5 else s.capitalize()
        if r.random() < 0.5:
            s += r.choice(PUNCT)
        return s

    def random_unicode(self):
        r = self.r
        out = []
        for _ in range(r.randint(1, 16)):
            x = r.random()
            if x < 0.2:
                out.append(chr(r.choice(self.marks)))
            elif x < 0.35:
                out.append(chr(r.randint(0x20, 0x7e)))
            else:
                out.append(chr(random_assigned(r)))
        return "".join(out)

    def fragment(self):
        r = self.r
        k = r.random()
        if k < 0.28:
            return self.words()
        if k < 0.36:
            return r.choice(CODE)
        if k < 0.44:
            return "".join(r.choice(EMOJI) for _ in range(r.randint(1, 4)))
        if k < 0.52:
            return "".join(r.choice(SPACES) for _ in range(r.randint(1, 6)))
        if k < 0.60:
            return "".join(r.choice(DIGITS) for _ in range(r.randint(1, 3)))
        if k < 0.66:
            return "".join(r.choice(PUNCT) for _ in range(r.randint(1, 5)))
        if k < 0.74 and self.specials:
            s = r.choice(self.specials)
            if r.random() < 0.25:
                s = s[: r.randint(1, max(1, len(s) - 1))]  # a partial literal
            return s
        if k < 0.80:
            base = r.choice(WORDS[r.choice(list(WORDS))])
            return base + "".join(r.choice(COMBINING) for _ in range(r.randint(1, 3)))
        if k < 0.86:
            return "".join(r.choice(NFC_CASES) for _ in range(r.randint(1, 3)))
        if k < 0.90:
            return r.choice("   \n\t") * r.randint(2, 40)
        return self.random_unicode()

    def text(self):
        r = self.r
        parts = []
        for _ in range(r.randint(1, 6)):
            parts.append(self.fragment())
            if r.random() < 0.5:
                parts.append(r.choice([" ", "", "\n", ", ", " ", "  "]))
        s = "".join(parts)
        if r.random() < 0.05:
            s = ""
        return s


# Flags set on Qwen3's added tokens for the "qwen3_flags" variant, which
# exercises lstrip/rstrip/single_word/normalized matching.
QWEN3_FLAGS = {
    "<think>": {"lstrip": True},
    "</think>": {"rstrip": True},
    "<tool_call>": {"single_word": True},
    "<tool_response>": {"normalized": True},
    "<|im_start|>": {"lstrip": True, "rstrip": True},
    "<|fim_prefix|>": {"single_word": True},
    "</tool_call>": {"single_word": True, "lstrip": True},
}


def flags_text(r, specials):
    """Added tokens next to letters, digits, underscores and whitespace runs."""
    out = []
    for _ in range(r.randint(1, 8)):
        k = r.random()
        if k < 0.4:
            out.append(r.choice(specials))
        elif k < 0.6:
            out.append(r.choice(["a", "word", "_", "9", "é", "世界", "x_y", "Ωmega"]))
        elif k < 0.85:
            out.append(r.choice(SPACES) * r.randint(1, 3))
        else:
            out.append(r.choice(PUNCT))
    return "".join(out)


def hf_reference(data, vocab, workdir):
    from tokenizers import Tokenizer
    header = {"vocab": vocab, "kind": "tokenizer.json", "dir": f"{data}/tokenizers/{vocab}"}
    if vocab == "qwen3_flags":
        import shutil
        with open(f"{data}/tokenizers/qwen3/tokenizer.json", encoding="utf-8") as f:
            tj = json.load(f)
        for t in tj["added_tokens"]:
            t.update(QWEN3_FLAGS.get(t["content"], {}))
        with open(f"{workdir}/tokenizer.json", "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False)
        shutil.copy(f"{data}/tokenizers/qwen3/tokenizer_config.json", workdir)
        header["dir"] = workdir
    path = f"{header['dir']}/tokenizer.json"
    tok = Tokenizer.from_file(path)
    with open(f"{header['dir']}/tokenizer_config.json") as f:
        cfg = json.load(f)

    def tok_name(v):
        if isinstance(v, dict):
            return v.get("content")
        return v

    bos = tok_name(cfg.get("bos_token"))
    eos = tok_name(cfg.get("eos_token"))
    bos_id = tok.token_to_id(bos) if (cfg.get("add_bos_token") and bos) else None
    eos_id = tok.token_to_id(eos) if (cfg.get("add_eos_token") and eos) else None
    specials = [t.content for t in tok.get_added_tokens_decoder().values()]

    def encode(texts):
        out = []
        for e in tok.encode_batch(texts):
            ids = e.ids
            if bos_id is not None:
                ids = [bos_id] + ids
            if eos_id is not None:
                ids = ids + [eos_id]
            out.append(ids)
        return out

    def decode(seqs, skip):
        return tok.decode_batch(seqs, skip_special_tokens=skip)

    return header, specials, encode, decode


def tiktoken_reference(data, vocab):
    import tiktoken
    import tiktoken_ext.openai_public as pub
    # Only the pattern and specials come from tiktoken's registry: its rank
    # loader (which would download) is replaced, and the ranks are read from
    # the local file.
    pub.load_tiktoken_bpe = lambda *args, **kwargs: {}
    spec = getattr(pub, vocab)()
    pattern = spec["pat_str"]
    specials = spec["special_tokens"]
    ranks = {}
    with open(f"{data}/tiktoken/{vocab}.tiktoken", "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    enc = tiktoken.Encoding(vocab, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)

    special_ids = set(specials.values())

    def encode(texts):
        return enc.encode_batch(texts, allowed_special="all", num_threads=2)

    def decode(seqs, skip):
        if skip:
            seqs = [[i for i in ids if i not in special_ids] for ids in seqs]
        return enc.decode_batch(seqs, errors="replace", num_threads=2)

    header = {"vocab": vocab, "kind": "tiktoken", "pattern": pattern,
              "specials": [[k, v] for k, v in specials.items()]}
    return header, list(specials), encode, decode


# Kimi's pre-tokenization pattern as tokenization_kimi.py defines it (Rust
# regex syntax, with class intersections); Strata spells it for PCRE2.
KIMI_PATTERN = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])


def kimi_reference(data, workdir):
    """A Kimi-style directory (tiktoken.model + tokenizer_config.json with
    added_tokens_decoder) built from the cl100k ranks, and tiktoken with
    Kimi's pattern and specials (named ones, then <|reserved_token_N|>)."""
    import shutil
    import tiktoken
    src = f"{data}/tiktoken/cl100k_base.tiktoken"
    ranks = {}
    with open(src, "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    base = len(ranks)
    named = {base: "[BOS]", base + 1: "[EOS]", base + 2: "<|im_end|>", base + 3: "<|im_user|>",
             base + 4: "<|tool_call_begin|>"}
    specials = {named.get(i, f"<|reserved_token_{i}|>"): i for i in range(base, base + 256)}
    shutil.copy(src, f"{workdir}/tiktoken.model")
    cfg = {"add_bos_token": True, "bos_token": "[BOS]", "eos_token": "[EOS]",
           "added_tokens_decoder": {str(i): {"content": c, "special": True, "lstrip": False,
                                             "rstrip": False, "normalized": False,
                                             "single_word": False}
                                    for i, c in named.items()}}
    with open(f"{workdir}/tokenizer_config.json", "w") as f:
        json.dump(cfg, f)
    enc = tiktoken.Encoding("kimi_test", pat_str=KIMI_PATTERN, mergeable_ranks=ranks,
                            special_tokens=specials)
    special_ids = set(specials.values())

    def encode(texts):
        return [[base] + ids for ids in enc.encode_batch(texts, allowed_special="all", num_threads=2)]

    def decode(seqs, skip):
        if skip:
            seqs = [[i for i in ids if i not in special_ids] for ids in seqs]
        return enc.decode_batch(seqs, errors="replace", num_threads=2)

    header = {"vocab": "kimi_cl100k", "kind": "tiktoken.model", "dir": workdir}
    return header, list(named.values()) + ["<|reserved_token_100300|>"], encode, decode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", help="where the qwen3_flags tokenizer.json is written")
    a = ap.parse_args()
    if a.vocab == "kimi_cl100k":
        header, specials, encode, decode = kimi_reference(a.data, a.workdir)
    elif a.vocab.endswith("_base"):
        header, specials, encode, decode = tiktoken_reference(a.data, a.vocab)
    else:
        header, specials, encode, decode = hf_reference(a.data, a.vocab, a.workdir)
    header.update(count=a.count, seed=a.seed)
    g = Gen(a.seed, specials)
    r = random.Random(a.seed + 1)
    if a.vocab == "qwen3_flags":
        texts = [flags_text(r, specials) if i % 2 else g.text() for i in range(a.count)]
    else:
        texts = [g.text() for _ in range(a.count)]
    all_ids = encode(texts)
    slices = []
    for ids in all_ids:
        a0 = r.randint(0, len(ids))
        slices.append((a0, r.randint(a0, len(ids))))
    dec = decode(all_ids, False)
    dec_skip = decode(all_ids, True)
    dec_slice = decode([ids[x:y] for ids, (x, y) in zip(all_ids, slices)], False)
    with open(a.out, "w", encoding="utf-8") as out:
        out.write(json.dumps(header, ensure_ascii=False) + "\n")
        for i, s in enumerate(texts):
            rec = {"text": s, "ids": all_ids[i], "decode": dec[i], "decode_skip": dec_skip[i],
                   "slice": list(slices[i]), "slice_decode": dec_slice[i]}
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
