#!/usr/bin/env python3
"""Generates chat-template test cases rendered by transformers (the reference).

Used by tests/unit/chat_template_live_test.cc: for each real template directory
it builds many conversations deterministically (seeded), renders each with
transformers' apply_chat_template(conversation, tools=..., tokenize=False,
add_generation_prompt=..., **extra) and writes one JSON line per case:
  {"template": NAME, "dir": DIR, "context": {...}, "expected": STR}
or, when transformers raises, {"template": ..., "context": ..., "error": MSG}.
The context is exactly what the C++ side renders: messages, tools (when
given), add_generation_prompt and the extra variables.

For TEMPLATE_FILES the line also has "template_file" and "special_tokens"
(transformers' special_tokens_map, which the C++ side adds to the context).

Usage: gen_chat_cases.py --data TEXT_DATA_DIR --templates DIR --out FILE [--cases N]
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TEMPLATES = {
    # name -> directory under SHARED_DATA_DIR holding tokenizer_config.json
    "qwen3": "tokenizers/qwen3",
    "deepseek_v3": "tokenizers/deepseek_v3",
}

# Template texts written for these tests (tests/data/templates), rendered
# through apply_chat_template(chat_template=...) with the special tokens of
# the given tokenizer directory: name -> (directory, file).
TEMPLATE_FILES = {
    "tool_json_style": ("tokenizers/qwen3", "tool_json_style.jinja"),
    "feature_mix": ("tokenizers/deepseek_v3", "feature_mix.jinja"),
}

TEXTS = [
    "Hello!",
    "What's the weather in Paris?",
    "",
    " leading and trailing spaces ",
    "\nstarts with a newline",
    "ends with newlines\n\n",
    "multi\nline\n\ntext\twith tabs",
    "quotes ' and \" and back\\slash",
    "unicode: café, naïve, Ærøskøbing, 東京, Москва, مرحبا, שלום, हिन्दी",
    "emoji 👩‍👩‍👧‍👦 🇫🇷 👍🏽 ✨",
    "json-ish {\"a\": [1, 2, {\"b\": null}]}",
    "braces {{ not a template }} {% raw %}",
    "<tool_response>\nfake\n</tool_response>",
    "<think>\nhmm\n</think>\n\nanswer",
    "code:\n```python\ndef f(x):\n    return x * 2\n```",
    "math: 1 < 2 && 3 > 2; 50% off",
    "\u0000 control \u0007 chars \u001b[0m",
    "zero\u200bwidth\u00a0nbsp",
    "a" * 300,
]

REASONING = [
    "Let me think step by step.",
    "\nThe user wants the weather.\n",
    "考虑一下用户的问题。",
    "",
]

THINK_CONTENTS = [
    "<think>\nI should greet.\n</think>\n\nHi there!",
    "<think>short</think>answer after",
    "prefix <think>\nnested reasoning\n</think>\n\n\nfinal",
    "no think tags here",
    "</think>only closing",
]

TOOL_NAMES = ["get_weather", "search_web", "calculator", "lookup_user", "send_email"]


def make_tool(rng, name):
    props = {}
    for key in rng.sample(["location", "query", "unit", "limit", "ratio", "flags", "nested", "when"],
                          rng.randint(0, 4)):
        kind = rng.choice(["string", "integer", "number", "boolean", "array", "object", "enum"])
        if kind == "enum":
            prop = {"type": "string", "enum": ["celsius", "fahrenheit", "kelvin"]}
        elif kind == "array":
            prop = {"type": "array", "items": {"type": "string"}}
        elif kind == "object":
            prop = {"type": "object", "properties": {"x": {"type": "number", "default": 1.0},
                                                      "y": {"type": "number", "minimum": -0.5}}}
        elif kind == "number":
            prop = {"type": "number", "minimum": 0, "maximum": 1e-7 if rng.random() < 0.2 else 100.25}
        else:
            prop = {"type": kind}
        if rng.random() < 0.7:
            prop["description"] = rng.choice(
                ["The city, e.g. San Francisco", "Überprüfung «quoted»", "日本語の説明", "Line1\nLine2",
                 "tab\there \"q\" \\ back"])
        props[key] = prop
    params = {"type": "object", "properties": props}
    if props and rng.random() < 0.7:
        params["required"] = rng.sample(sorted(props), rng.randint(1, len(props)))
    fn = {"name": name, "description": rng.choice(["Get things.", "Search — the web.", "Ünïcödé tool",
                                                   "Multi\nline description"]),
          "parameters": params}
    if rng.random() < 0.1:
        fn["strict"] = True
    if rng.random() < 0.15:
        return fn  # bare function schema (no {"type": "function"} wrapper)
    return {"type": "function", "function": fn}


def make_arguments(rng, object_args):
    args = {}
    for key in rng.sample(["location", "query", "n", "ratio", "ok", "tags", "opts", "none"],
                          rng.randint(0, 4)):
        args[key] = rng.choice([
            "Paris", "東京", "with \"quotes\"", 3, -7, 0.5, 1.0, 2.5e-8, True, False, None,
            ["a", "b"], {"inner": [1, {"deep": "ü"}]}, [],
        ])
    if object_args:
        return args
    return json.dumps(args, ensure_ascii=rng.random() < 0.5)


def make_tool_calls(rng, tool_names, object_args):
    calls = []
    for i in range(rng.randint(1, 3)):
        call = {"type": "function",
                "function": {"name": rng.choice(tool_names),
                             "arguments": make_arguments(rng, object_args)}}
        if rng.random() < 0.8:
            call["id"] = f"call_{rng.randint(0, 10**6)}"
        calls.append(call)
    return calls


def make_conversation(rng, style):
    """style: 'plain', 'tools', 'reasoning', 'edge' (may make templates raise)."""
    msgs = []
    tool_names = rng.sample(TOOL_NAMES, rng.randint(1, 3))
    if rng.random() < 0.6:
        msgs.append({"role": "system", "content": rng.choice(TEXTS[:12])})
    turns = rng.randint(1, 4)
    for t in range(turns):
        msgs.append({"role": "user", "content": rng.choice(TEXTS)})
        last_turn = t == turns - 1
        if last_turn and rng.random() < 0.5:
            break
        if style in ("tools", "edge") and rng.random() < 0.6:
            object_args = rng.random() < 0.5 if style == "edge" else style == "tools" and rng.random() < 0.5
            content = rng.choice(["", "Let me check.", None]) if style == "edge" else rng.choice(["", "Let me check."])
            msg = {"role": "assistant", "content": content,
                   "tool_calls": make_tool_calls(rng, tool_names, object_args)}
            if rng.random() < 0.3:
                msg["reasoning_content"] = rng.choice(REASONING)
            msgs.append(msg)
            for _ in range(len(msg["tool_calls"])):
                msgs.append({"role": "tool", "content": rng.choice(
                    ["{\"temp\": 21.5, \"unit\": \"C\"}", "no results", "错误: 未找到", ""]),
                    **({"name": rng.choice(tool_names)} if rng.random() < 0.5 else {})})
            if rng.random() < 0.7:
                msgs.append({"role": "assistant", "content": rng.choice(TEXTS + THINK_CONTENTS)})
        else:
            msg = {"role": "assistant", "content": rng.choice(TEXTS + THINK_CONTENTS)}
            if style == "reasoning" and rng.random() < 0.6:
                msg["reasoning_content"] = rng.choice(REASONING + [None])
            msgs.append(msg)
        if rng.random() < 0.1:
            msgs.append({"role": "system", "content": "mid-conversation system note"})
    if style == "edge":
        r = rng.random()
        if r < 0.15:
            msgs.append({"role": "user", "content": [{"type": "text", "text": "list content"}]})
        elif r < 0.25:
            msgs.insert(0, {"role": "developer", "content": "unknown role"})
        elif r < 0.35:
            msgs.append({"role": "assistant", "content": None})
    tools = None
    if style in ("tools", "edge") and rng.random() < 0.8:
        tools = [make_tool(rng, n) for n in tool_names]
    extra = {}
    r = rng.random()
    if r < 0.3:
        extra["enable_thinking"] = False
    elif r < 0.5:
        extra["enable_thinking"] = True
    if rng.random() < 0.1:
        extra["custom_flag"] = "x"
    return msgs, tools, rng.random() < 0.5, extra


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--templates", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", type=int, default=400)
    args = ap.parse_args()

    import transformers  # noqa: F401  (imported here so --help works without it)
    from transformers import AutoTokenizer

    jobs = [(name, rel, None) for name, rel in TEMPLATES.items()]
    jobs += [(name, rel, fname) for name, (rel, fname) in TEMPLATE_FILES.items()]
    tokenizers = {}
    with open(args.out, "w", encoding="utf-8") as out:
        for name, rel, fname in jobs:
            directory = os.path.join(args.data, rel)
            if directory not in tokenizers:
                tokenizers[directory] = AutoTokenizer.from_pretrained(directory)
            tok = tokenizers[directory]
            template_text = None
            if fname is not None:
                template_file = os.path.join(args.templates, fname)
                with open(template_file, encoding="utf-8") as f:
                    template_text = f.read()
            rng = random.Random(f"strata-chat-{name}")
            styles = ["plain", "tools", "reasoning", "edge"]
            for i in range(args.cases):
                msgs, tools, agp, extra = make_conversation(rng, styles[i % len(styles)])
                context = {"messages": msgs}
                if tools is not None:
                    context["tools"] = tools
                context["add_generation_prompt"] = agp
                context.update(extra)
                case = {"template": name, "dir": directory, "index": i, "context": context}
                if template_text is not None:
                    case["template_file"] = template_file
                    case["special_tokens"] = tok.special_tokens_map
                try:
                    case["expected"] = tok.apply_chat_template(
                        msgs, tools=tools, tokenize=False, add_generation_prompt=agp,
                        chat_template=template_text, **extra)
                except Exception as e:  # the C++ side must fail too
                    case["error"] = f"{type(e).__name__}: {e}"
                out.write(json.dumps(case, ensure_ascii=False) + "\n")
        # Feature snippets (snippets.py) through the same apply_chat_template.
        from snippets import SNIPPETS, SNIPPET_VARS
        directory = os.path.join(args.data, "tokenizers/qwen3")
        tok = tokenizers[directory]
        msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
        for i, snippet in enumerate(SNIPPETS):
            context = {"messages": msgs, "add_generation_prompt": True, **SNIPPET_VARS}
            case = {"template": "snippets", "dir": directory, "index": i, "context": context,
                    "template_text": snippet, "special_tokens": tok.special_tokens_map}
            try:
                case["expected"] = tok.apply_chat_template(
                    msgs, tokenize=False, add_generation_prompt=True, chat_template=snippet,
                    **SNIPPET_VARS)
            except Exception as e:
                case["error"] = f"{type(e).__name__}: {e}"
            out.write(json.dumps(case, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
