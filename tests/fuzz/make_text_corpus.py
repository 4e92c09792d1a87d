#!/usr/bin/env python3
"""Writes the seed corpora of the tokenizer-file fuzzers.

    tests/fuzz/make_text_corpus.py BUILD/text_data tests/fuzz/corpus

Into corpus/tokenizer_json, corpus/tokenizer_config and corpus/tiktoken:
small hand-made files (ok_* must load, bad_* must be refused, see
corpus_replay_test.cc) and small files derived from the real tokenizers that
configure unpacks from tests/data/text/text_data.tar.xz: their normalizer,
pre-tokenizer, post-processor and decoder sections with a vocabulary cut down
to the merges that spell a few sample words, and the head of each tiktoken
rank file. Files the fuzzer found are not touched; rerun after changing this.
"""
import base64
import json
import os
import sys

SAMPLE = "Hello world, the quick brown fox: 12345 isn't it?\n  日本語 café"


def byte_level_chars():
    """GPT-2's byte -> printable character table (ByteLevel)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def dump(obj):
    return json.dumps(obj, ensure_ascii=False, indent=1).encode()


def write(dirname, name, data):
    os.makedirs(dirname, exist_ok=True)
    with open(os.path.join(dirname, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def derived_tokenizer(real, keep_added):
    """The real file's pipeline with the vocabulary cut to the merges that
    build the byte-level spelling of SAMPLE's words, renumbered densely."""
    table = byte_level_chars()
    spelled = "".join(table[b] for b in SAMPLE.encode())
    have = set(spelled)
    model = real["model"]
    merges = []
    for m in model["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in have and b in have and (a + b) in spelled:
            merges.append([a, b])
            have.add(a + b)
        if len(merges) >= 40:
            break
    for b in range(256):  # every byte, so any text encodes
        have.add(table[b])
    order = sorted(have, key=lambda t: model["vocab"].get(t, 1 << 30))
    vocab = {t: i for i, t in enumerate(order)}
    out = {k: real[k] for k in ("version", "normalizer", "pre_tokenizer", "post_processor", "decoder")}
    out["model"] = dict(model, vocab=vocab, merges=merges)
    added = [t for t in real["added_tokens"] if t["content"] in keep_added]
    for i, t in enumerate(added):
        t = dict(t, id=len(vocab) + i)
        added[i] = t
    out["added_tokens"] = added
    return out


def tiny_tokenizer(merges_as_pairs=False, post_processor=None):
    """A byte-level BPE of a few dozen tokens, with added tokens."""
    table = byte_level_chars()
    letters = [table[b] for b in b"abcdehilnorstw ,.!"]
    merges = [("a", "b"), ("ab", "c"), ("\u0120", "ab"), ("h", "e"), ("l", "l"), ("he", "ll"),
              ("hell", "o"), ("\u0120", "w"), ("o", "r"), ("\u0120w", "or"), ("l", "d"),
              ("\u0120wor", "ld"), ("t", "h"), ("th", "e"), ("\u0120", "the")]
    vocab = {}
    for t in letters + [a + b for a, b in merges]:
        vocab.setdefault(t, len(vocab))
    n = len(vocab)
    return {
        "version": "1.0",
        "added_tokens": [
            {"id": n, "content": "<s>", "special": True, "lstrip": False, "rstrip": False,
             "normalized": False, "single_word": False},
            {"id": n + 1, "content": "</s>", "special": True},
            {"id": n + 2, "content": "<mask>", "special": True, "lstrip": True, "rstrip": True},
            {"id": n + 3, "content": " hello", "special": False, "normalized": True,
             "single_word": True},
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "post_processor": post_processor,
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                  "vocab": vocab,
                  "merges": [list(m) if merges_as_pairs else " ".join(m) for m in merges]},
    }


def sentencepiece_like():
    """Metaspace + byte fallback + a normalizer and decoder Sequence, as
    Llama-style files have."""
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    words = ["\u2581", "h", "e", "l", "o", "w", "r", "d", "\u2581h", "\u2581he", "ll", "\u2581hell",
             "\u2581hello", "\u2581w", "or", "\u2581wor", "\u2581world"]
    vocab = {t: i for i, t in enumerate(pieces + words)}
    merges = ["\u2581 h", "\u2581h e", "l l", "\u2581he ll", "\u2581hell o", "\u2581 w", "o r",
              "\u2581w or", "\u2581wor l", "\u2581worl d"]
    merges = [m for m in merges if all(p in vocab for p in m.split(" ") + ["".join(m.split(" "))])]
    return {
        "version": "1.0",
        "added_tokens": [{"id": 0, "content": "<unk>", "special": True},
                         {"id": 1, "content": "<s>", "special": True},
                         {"id": 2, "content": "</s>", "special": True}],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Lowercase"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
            {"type": "Prepend", "prepend": "\u2581"}, {"type": "Strip", "left": False, "right": True}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "Split", "pattern": {"Regex": "[.,!?]"}, "behavior": "Isolated",
             "invert": False}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1],
                                                                 "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True,
                  "vocab": vocab, "merges": merges},
    }


def tokenizer_json_corpus(text_data, out):
    d = os.path.join(out, "tokenizer_json")
    write(d, "ok_tiny_bpe.json", dump(tiny_tokenizer()))
    write(d, "ok_tiny_bpe_pair_merges.json", dump(tiny_tokenizer(merges_as_pairs=True)))
    write(d, "ok_tiny_bpe_with_text.json",
          dump(tiny_tokenizer()) + b"\0hello world <s>abc</s> <mask> the")
    roberta = {"type": "RobertaProcessing", "sep": ["</s>", 1], "cls": ["<s>", 0]}
    write(d, "ok_tiny_bpe_roberta.json", dump(tiny_tokenizer(post_processor=roberta)))
    seq = {"type": "Sequence", "processors": [{"type": "ByteLevel"}, roberta]}
    write(d, "ok_tiny_bpe_processor_sequence.json", dump(tiny_tokenizer(post_processor=seq)))
    write(d, "ok_sentencepiece_like.json", dump(sentencepiece_like()))
    write(d, "ok_sentencepiece_like_with_text.json",
          dump(sentencepiece_like()) + "\0Hello World 42! ünïcode\u00a0x".encode())
    for name, keep in (("qwen3", {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>"}),
                       ("deepseek_v3", {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
                                        "<｜User｜>", "<｜Assistant｜>"})):
        with open(os.path.join(text_data, "tokenizers", name, "tokenizer.json"), encoding="utf-8") as f:
            real = json.load(f)
        small = dump(derived_tokenizer(real, keep))
        write(d, "ok_%s_derived.json" % name, small)
        write(d, "ok_%s_derived_with_text.json" % name, small + b"\0" + SAMPLE.encode())
    tiny = tiny_tokenizer()
    def variant(edit):
        t = json.loads(json.dumps(tiny))
        edit(t)
        return dump(t)
    write(d, "bad_not_object.json", b"[]")
    write(d, "bad_no_model.json", variant(lambda t: t.pop("model")))
    write(d, "bad_wordpiece.json", variant(lambda t: t["model"].update(type="WordPiece")))
    write(d, "bad_merge_unknown_token.json", variant(lambda t: t["model"]["merges"].append("q z")))
    write(d, "bad_merge_no_space.json", variant(lambda t: t["model"]["merges"].append("ab")))
    write(d, "bad_negative_id.json", variant(lambda t: t["model"]["vocab"].update(x=-1)))
    write(d, "bad_dropout.json", variant(lambda t: t["model"].update(dropout=0.1)))
    write(d, "bad_regex.json", variant(lambda t: t.update(pre_tokenizer={
        "type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"})))
    write(d, "bad_pre_tokenizer_type.json", variant(lambda t: t.update(pre_tokenizer={"type": "Bogus"})))
    write(d, "bad_normalizer_type.json", variant(lambda t: t.update(normalizer={"type": "Bogus"})))
    write(d, "bad_decoder_type.json", variant(lambda t: t.update(decoder={"type": "Bogus"})))
    write(d, "bad_added_negative_id.json",
          variant(lambda t: t["added_tokens"].append({"id": -3, "content": "x"})))
    write(d, "bad_template_missing_special.json", variant(lambda t: t.update(post_processor={
        "type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<cls>"}}],
        "special_tokens": {}})))
    write(d, "bad_unk_not_in_vocab.json", variant(lambda t: t["model"].update(unk_token="<unk>")))
    write(d, "bad_deep.json", b'{"model": ' + b"[" * 300 + b"]" * 300 + b"}")
    write(d, "bad_truncated.json", dump(tiny)[:200])
    # Each of these once crashed the loader (an escaped exception, an id cut
    # to 32 bits, a table sized by a huge id, an unchecked post-processor id).
    write(d, "bad_dropout_not_number.json", variant(lambda t: t["model"].update(dropout="x")))
    write(d, "bad_added_flag_not_bool.json",
          variant(lambda t: t["added_tokens"][0].update(special="yes")))
    write(d, "bad_added_id_over_int32.json",
          variant(lambda t: t["added_tokens"].append({"id": 4294967295, "content": "zz"})))
    write(d, "bad_added_id_over_limit.json",
          variant(lambda t: t["added_tokens"].append({"id": 2000000000, "content": "zz"})))
    write(d, "bad_vocab_id_int32_max.json", variant(lambda t: t["model"]["vocab"].update(zz=2**31 - 1)))
    write(d, "bad_post_processor_id_out_of_vocab.json", variant(lambda t: t.update(post_processor={
        "type": "RobertaProcessing", "cls": ["<s>", 0], "sep": ["</s>", 99999]})))
    write(d, "bad_template_id_over_int32.json", variant(lambda t: t.update(post_processor={
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
        "special_tokens": {"<s>": {"ids": [2**32]}}})))


def tokenizer_config_corpus(text_data, out):
    d = os.path.join(out, "tokenizer_config")
    for name in ("qwen3", "deepseek_v3"):
        with open(os.path.join(text_data, "tokenizers", name, "tokenizer_config.json"), "rb") as f:
            write(d, "ok_%s.json" % name, f.read())
    write(d, "ok_empty_object.json", b"{}")
    write(d, "ok_bos_eos.json", dump({"add_bos_token": True, "add_eos_token": False,
                                      "bos_token": {"content": "<s>", "lstrip": False},
                                      "eos_token": "</s>", "unk_token": None}))
    kimi = {"bos_token": "[BOS]", "eos_token": "[EOS]", "add_bos_token": True,
            "added_tokens_decoder": {
                "265": {"content": "[BOS]", "special": True},
                "266": {"content": "[EOS]", "special": True, "lstrip": False, "rstrip": False},
                "267": {"content": "<|im_user|>", "special": True},
                "268": {"content": "<|im_end|>", "special": True, "single_word": False},
                "400": {"content": "<|tool_call_begin|>", "special": True}},
            "chat_template": "{% for m in messages %}<|im_{{ m.role }}|>{{ m.content }}<|im_end|>"
                             "{% endfor %}{% if add_generation_prompt %}<|im_assistant|>{% endif %}"}
    write(d, "ok_kimi_layout.json", dump(kimi))
    write(d, "ok_template_list.json", dump({
        "eos_token": "</s>",
        "chat_template": [
            {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.role }}: "
                                            "{{ m.content }}\n{% endfor %}"},
            {"name": "tool_use", "template": "{{ tools | tojson }}{% for m in messages %}"
                                             "<tool_call>{{ m.content }}</tool_call>{% endfor %}"}]}))
    write(d, "tmpl_syntax_error.json", dump({"chat_template": "{% for m in messages %}{{ m"}))
    write(d, "tmpl_not_string.json", dump({"chat_template": 3}))
    write(d, "tmpl_list_without_default.json", dump({"chat_template": [
        {"name": "a", "template": "x"}, {"name": "b", "template": "y"}]}))
    write(d, "tmpl_raise.json", dump({"chat_template": "{{ raise_exception('no') }}"}))
    write(d, "bad_not_object.json", b'"chat_template"')
    write(d, "bad_bool_field.json", dump({"add_bos_token": "yes"}))
    write(d, "bad_token_field.json", dump({"bos_token": 5}))
    write(d, "bad_decoder_key.json", dump({"added_tokens_decoder": {"x": {"content": "a"}}}))
    write(d, "bad_decoder_negative_key.json", dump({"added_tokens_decoder": {"-1": {"content": "a"}}}))
    write(d, "bad_decoder_no_content.json", dump({"added_tokens_decoder": {"3": {"special": True}}}))
    write(d, "bad_deep.json", b'{"x": ' + b"[" * 300 + b"]" * 300 + b"}")
    # Each of these once crashed a reader (an escaped exception; an id whose
    # id + 1 overflowed in the tiktoken tokenizer).
    write(d, "bad_decoder_flag_not_bool.json",
          dump({"added_tokens_decoder": {"300": {"content": "<x>", "lstrip": 1}}}))
    write(d, "bad_decoder_key_int32_max.json",
          dump({"added_tokens_decoder": {"2147483647": {"content": "<x>", "special": True}}}))


def tiktoken_corpus(text_data, out):
    d = os.path.join(out, "tiktoken")
    def line(token, rank):
        return base64.b64encode(token).decode() + " " + str(rank) + "\n"
    all_bytes = "".join(line(bytes([b]), b) for b in range(256))
    write(d, "ok_bytes_only.tiktoken", all_bytes)
    merged = all_bytes + "".join(line(t, 256 + i) for i, t in enumerate(
        [b"ab", b"abc", b" a", b"he", b"ll", b"hell", b"hello", b" hello", b"<|", b"|>"]))
    write(d, "ok_merges_with_text.tiktoken", merged + "\0hello abc <|x|> \u65e5\u672c 123")
    write(d, "ok_crlf_blank_lines.tiktoken", "\r\n".join(merged.split("\n")) + "\r\n\r\n")
    write(d, "ok_gap_in_ranks.tiktoken", all_bytes + line(b"ab", 300))
    for name in ("cl100k_base", "o200k_base"):
        with open(os.path.join(text_data, "tiktoken", name + ".tiktoken")) as f:
            head = "".join(f.readline() for _ in range(400))
        write(d, "ok_%s_head.tiktoken" % name, head)
        write(d, "ok_%s_head_with_text.tiktoken" % name, head + "\0" + SAMPLE)
    write(d, "bad_empty.tiktoken", "")
    write(d, "bad_missing_byte.tiktoken", "".join(line(bytes([b]), b) for b in range(255)))
    write(d, "bad_base64.tiktoken", all_bytes + "@@@@ 256\n")
    write(d, "bad_empty_token.tiktoken", all_bytes + " 256\n")
    write(d, "bad_duplicate.tiktoken", all_bytes + line(b"a", 256))
    write(d, "bad_negative_rank.tiktoken", all_bytes + line(b"ab", -1))
    write(d, "bad_no_rank.tiktoken", all_bytes + base64.b64encode(b"ab").decode() + "\n")
    write(d, "bad_rank_not_number.tiktoken", all_bytes + line(b"ab", "x"))
    write(d, "bad_rank_overflow.tiktoken", all_bytes + line(b"ab", 99999999999))
    # Two tokens with one rank: accepted once, and then decoded as each other.
    write(d, "bad_duplicate_rank.tiktoken", all_bytes + line(b"ab", 256) + line(b"cd", 256))
    # Accepted once, and then sized the id table by it (2^31 strings).
    write(d, "bad_rank_int32_max.tiktoken", all_bytes + line(b"ab", 2**31 - 1))
    write(d, "bad_rank_over_limit.tiktoken", all_bytes + line(b"ab", 1 << 24))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    text_data, out = sys.argv[1], sys.argv[2]
    tokenizer_json_corpus(text_data, out)
    tokenizer_config_corpus(text_data, out)
    tiktoken_corpus(text_data, out)


if __name__ == "__main__":
    main()
