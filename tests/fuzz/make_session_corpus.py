#!/usr/bin/env python3
"""Writes the hand-made seeds of the saved-session and state-object fuzzers
(tests/fuzz/corpus/session_file and state_object): bodies of the formats in
src/engine/session_file.h and src/memory/state_object.h, ok_* ones the body
parsers must accept and bad_* ones they must refuse."""
import os
import struct
import sys


def u64(v):
    return struct.pack("<Q", v)


def s(text):
    b = text.encode()
    return u64(len(b)) + b


def arr(fmt, values):
    return u64(len(values)) + b"".join(struct.pack("<" + fmt, v) for v in values)


def point(id_=0, tokens=(), num_tokens=0, messages=0, logits=(), state=b""):
    return (u64(id_) + arr("i", tokens) + u64(num_tokens) + u64(messages) + arr("f", logits) +
            u64(len(state)) + state)


def body(tokens=(), evaluated=0, logits=(), state=b"\0" * 8, conv=0, messages="[]", tools="[]",
         turn=None, marks=(), next_mark=1, max_context=64, vocab=16, trailer=b""):
    out = s("kimi_linear") + s("ab" * 32) + s("cpu.v1;block=64;rows:f32x4") + u64(vocab)
    out += u64(max_context) + arr("i", tokens) + u64(evaluated) + arr("f", logits)
    out += u64(len(state)) + state + u64(conv) + s(messages) + s(tools)
    out += u64(1 if turn is not None else 0) + (turn if turn is not None else point())
    out += u64(len(marks)) + b"".join(marks) + u64(next_mark)
    return out + trailer


def fingerprint():
    return s("kimi_linear") + s("ab" * 32) + s("cpu.v1;block=64;rows:f32x4") + u64(16)


def obj(tokens=(1, 2, 3), first=0, context=64, logits=(), state=b"\0" * 8, key=b"\1" * 32, trailer=b""):
    return (fingerprint() + key + u64(first) + arr("i", tokens) + u64(context) + arr("f", logits) +
            u64(len(state)) + state + trailer)


def write(out, seeds):
    os.makedirs(out, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    write(os.path.join(root, "state_object"), {
        "ok_small": obj(),
        "ok_logits": obj(tokens=list(range(70)), context=128, logits=[0.5] * 16, state=b"\2" * 64),
        "bad_truncated": obj()[:-5],
        "bad_trailing_byte": obj(trailer=b"\0"),
        "bad_first_token": obj(first=3),
        "bad_context_below_tokens": obj(tokens=[1, 2, 3], context=2),
        "bad_zero_context": obj(context=0),
        "bad_short_key": fingerprint() + b"\1" * 10,
    })
    out = os.path.join(root, "session_file")
    logits = [0.5] * 16
    seeds = {
        "ok_empty": body(),
        "ok_history": body(tokens=[1, 2, 3, 4], evaluated=4, logits=logits, state=b"\1" * 40),
        "ok_pending_token": body(tokens=[1, 2, 3], evaluated=2, logits=logits),
        "ok_chat_marks": body(
            tokens=[5, 6, 7], evaluated=3, logits=logits, conv=1,
            messages='[{"role": "user", "content": "hi"}]',
            tools='[{"type": "function", "function": {"name": "f", "description": "d", '
                  '"parameters": {"type": "object"}}}]',
            turn=point(num_tokens=2, logits=logits, state=b"\2" * 16),
            marks=[point(1, [5, 6], 2, 1, logits, b"\3" * 8), point(3, [5], 1, 0, [], b"\4" * 8)],
            next_mark=4),
        "bad_truncated": body(tokens=[1, 2], evaluated=2)[:-3],
        "bad_trailing_byte": body(trailer=b"\0"),
        "bad_evaluated_past_history": body(tokens=[1], evaluated=2),
        "bad_two_pending": body(tokens=[1, 2, 3], evaluated=1),
        "bad_mark_ids_descend": body(marks=[point(2), point(1)], next_mark=3),
        "bad_mark_id_at_next": body(marks=[point(1)], next_mark=1),
        "bad_flag_not_bool": body(conv=2),
        "bad_zero_context": body(max_context=0),
        "bad_history_over_context": body(tokens=[1, 2, 3], evaluated=3, max_context=2),
        "bad_turn_past_evaluated": body(tokens=[1], evaluated=1, turn=point(num_tokens=2)),
        "bad_huge_length": s("kimi_linear")[:0] + u64(1 << 62),
        "bad_huge_token_count": s("a") + s("b") + s("c") + u64(16) + u64(64) + u64(1 << 61),
        "bad_many_marks": body()[:-16] + u64(1 << 40) + u64(1),
    }
    write(out, seeds)


if __name__ == "__main__":
    main()
