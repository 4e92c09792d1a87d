#!/usr/bin/env python3
"""Generates the demo model's training and evaluation data (stdlib only, seeded).

Conversations (JSONL, one {"messages", "tools", "expect", "files"} object a
line; "files" is the conversation's sandbox, path -> text) in
which the assistant decides whether a tool is needed, calls it with correct
JSON arguments, and answers from the result; the results come from the
reference tool implementations in tools.py (what samples/agent runs):
  * arithmetic through calculator (integers and decimals, word problems,
    parentheses; the answer quotes the exact result),
  * unit conversions, chemical-element lookups,
  * listing and reading files in a generated sandbox, including two-step
    chains (list then read, read then calculate) and error results,
  * small talk and questions about the assistant, answered without tools,
  * 1 to 3 user turns per conversation.
Each conversation's "expect" records, per user turn, the tool calls a correct
assistant makes and a string its final answer must contain; evaluate.py reads
it. Plain text for fluency (docstrings and comments of the Python standard
library on this machine) goes to plain.jsonl.

Usage: python3 gen_data.py --out DIR [--train 60000] [--eval 500] [--seed 1]
"""
import argparse
import ast
import json
import os
import random
import sys
import sysconfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tools as T  # noqa: E402

# ---------------------------------------------------------------------------
# numbers and expressions


def rand_number(r, decimals_p=0.35):
    whole = r.choice([r.randint(0, 9), r.randint(10, 99), r.randint(100, 999),
                      r.randint(1000, 99999)])
    if r.random() < decimals_p:
        whole = r.choice([r.randint(0, 9), r.randint(10, 99), r.randint(100, 999)])
        places = r.choice([1, 1, 2, 2, 3])
        frac = f"{r.randint(1, 10 ** places - 1):0{places}d}".rstrip("0")
        return f"{whole}.{frac}"
    return str(whole)


def rand_expression(r):
    n = r.choice([2, 2, 2, 3, 3, 4])
    nums = [rand_number(r) for _ in range(n)]
    ops = [r.choice("+-*/") for _ in range(n - 1)]
    if "/" in ops:
        # Keep most divisions exact-looking: divisor among small integers.
        for i, op in enumerate(ops):
            if op == "/" and r.random() < 0.7:
                nums[i + 1] = str(r.choice([2, 3, 4, 5, 8, 10, 12, 16, 20, 25, 100]))
    parts = [nums[0]]
    for op, x in zip(ops, nums[1:]):
        parts += [op, x]
    expr = " ".join(parts)
    if n >= 3 and r.random() < 0.4:
        # Parenthesise the first two operands.
        expr = f"({parts[0]} {parts[1]} {parts[2]})" + (" " + " ".join(parts[3:]) if n > 2 else "")
    return expr


CALC_QUESTIONS = [
    "What is {e}?", "Compute {e}.", "Calculate {e}", "How much is {e}?", "what's {e}",
    "Please work out {e}.", "{e} = ?", "Can you tell me what {e} equals?",
    "I need the value of {e}.", "Evaluate {e} for me.",
]
CALC_ANSWERS = [
    "{e} = {v}.", "The result is {v}.", "{v}", "It equals {v}.", "The answer is {v}.",
    "{e} equals {v}.",
]


def word_problem(r):
    """(question, expression) pairs in words."""
    k = r.randrange(6)
    if k == 0:
        n, p = r.randint(2, 40), rand_number(r, 0.8)
        return f"I bought {n} items at {p} each. What is the total?", f"{n} * {p}"
    if k == 1:
        a, b = rand_number(r), rand_number(r)
        return f"What is the sum of {a} and {b}?", f"{a} + {b}"
    if k == 2:
        a, b = rand_number(r), rand_number(r)
        return f"Subtract {b} from {a}.", f"{a} - {b}"
    if k == 3:
        a, b = rand_number(r, 0.2), r.choice([2, 3, 4, 5, 6, 8, 10])
        return f"Split {a} into {b} equal parts. How big is each part?", f"{a} / {b}"
    if k == 4:
        a, b = rand_number(r), rand_number(r)
        return f"Multiply {a} by {b}.", f"{a} * {b}"
    a, b, c = rand_number(r, 0.5), rand_number(r, 0.5), rand_number(r, 0.5)
    return (f"A box holds {a} kg and another {b} kg. Together they cost {c} per kg. "
            f"What do they cost?"), f"({a} + {b}) * {c}"


# ---------------------------------------------------------------------------
# sandbox

WORDS = ("alpha beta gamma delta apple river stone cloud paper green orange lamp garden "
         "winter summer budget meeting project report draft plan notes ideas recipe "
         "travel music photo invoice order list backup config server client").split()
DIRS = ["docs", "notes", "data", "reports", "src", "work", "home", "archive"]
# --random-names P: with probability P a directory name, file name or word of
# a file's text is a made-up word instead of one from the lists above, so the
# model must copy names it has never seen rather than recall a closed set.
RANDOM_NAMES = 0.0
_SYLLABLES = ("ka ri to mu sen la vo pe dri qui nox bel tam fi zu or an el yg "
              "stra pol kin ber mo ha tu ve lin dor").split()


def made_up_word(r):
    return "".join(r.choice(_SYLLABLES) for _ in range(r.randint(2, 3)))


def word(r, words=None):
    if RANDOM_NAMES and r.random() < RANDOM_NAMES:
        return made_up_word(r)
    return r.choice(words or WORDS)


def file_text(r, name):
    if name.endswith(".csv") or name.startswith("numbers"):
        vals = [rand_number(r, 0.3) for _ in range(r.randint(2, 5))]
        return "\n".join(vals)
    if "todo" in name:
        items = r.sample(["buy milk", "call Anna", "fix the build", "write the report",
                          "water the plants", "book a train", "pay the invoice",
                          "review the draft", "back up the laptop"], r.randint(2, 4))
        return "\n".join(f"- {x}" for x in items)
    n = r.randint(1, 3)
    sents = []
    for _ in range(n):
        w = r.sample(WORDS, 4)
        if RANDOM_NAMES:
            w = [made_up_word(r) if r.random() < RANDOM_NAMES else x for x in w]
        sents.append(f"The {w[0]} {w[1]} is next to the {w[2]} {w[3]}.")
    return " ".join(sents)


def make_sandbox(r):
    files = {}
    top = r.sample(["README.md", "todo.txt", "notes.txt", "numbers.txt", "hello.txt"],
                   r.randint(1, 3))
    for f in top:
        files[f] = file_text(r, f)
    dirs = r.sample(DIRS, r.randint(1, 3))
    if RANDOM_NAMES:
        dirs = [made_up_word(r) if r.random() < RANDOM_NAMES else d for d in dirs]
    for d in dirs:
        for _ in range(r.randint(1, 3)):
            base = word(r)
            ext = r.choice([".txt", ".txt", ".md", ".csv"])
            files[f"{d}/{base}{ext}"] = file_text(r, base + ext)
    return files


# ---------------------------------------------------------------------------
# conversation building


def call(name, args):
    return {"type": "function", "function": {"name": name,
                                             "arguments": dict(sorted(args.items()))}}


class Conv:
    def __init__(self, r, tools):
        self.r = r
        self.messages = []
        self.tools = tools
        self.expect = []
        self.files = None

    def user(self, text):
        self.messages.append({"role": "user", "content": text})
        self.expect.append({"user": text, "calls": [], "answer_contains": None})

    def tool_round(self, calls):
        """One assistant message with `calls` [(name, args)], then their results."""
        self.messages.append({"role": "assistant", "content": "",
                              "tool_calls": [call(n, a) for n, a in calls]})
        results = []
        for n, a in calls:
            res = T.run_tool(n, a, self.files)
            self.messages.append({"role": "tool", "name": n, "content": res})
            self.expect[-1]["calls"].append({"name": n, "arguments": T.canonical_args(a)})
            results.append(res)
        return results

    def answer(self, text, contains):
        self.messages.append({"role": "assistant", "content": text})
        self.expect[-1]["answer_contains"] = contains


def turn_calc(c):
    r = c.r
    if r.random() < 0.35:
        q, e = word_problem(r)
    else:
        e = rand_expression(r)
        q = r.choice(CALC_QUESTIONS).format(e=e)
    c.user(q)
    (v,) = c.tool_round([("calculator", {"expression": e})])
    if v.startswith("error"):
        c.answer(f"I can't compute that: {v[len('error: '):]}.", v[len("error: "):])
    else:
        c.answer(r.choice(CALC_ANSWERS).format(e=e, v=v), v)


def turn_convert(c):
    r = c.r
    kind = r.choice(["length", "length", "mass", "volume", "temperature"])
    units = [u for u, (k, _) in T.UNITS.items() if k == kind]
    frm, to = r.sample(units, 2)
    value = float(rand_number(r, 0.4))
    if r.random() < 0.2:
        value = -value if kind == "temperature" else value
    vs = T.format_number(value)
    names = {"mm": "millimeters", "cm": "centimeters", "m": "meters", "km": "kilometers",
             "in": "inches", "ft": "feet", "mi": "miles", "g": "grams", "kg": "kilograms",
             "lb": "pounds", "oz": "ounces", "ml": "milliliters", "l": "liters",
             "gal": "gallons", "C": "degrees Celsius", "F": "degrees Fahrenheit",
             "K": "kelvin"}
    q = r.choice([f"Convert {vs} {frm} to {to}.", f"How many {names[to]} is {vs} {names[frm]}?",
                  f"What is {vs} {names[frm]} in {names[to]}?", f"{vs} {frm} in {to}?"])
    c.user(q)
    num = int(value) if value == int(value) and abs(value) < 1e15 else value
    (res,) = c.tool_round([("convert_units", {"value": num, "from_unit": frm, "to_unit": to})])
    got = res.split(" = ")[1]
    c.answer(r.choice([f"{vs} {frm} is {got}.", f"That is {got}.", f"{res}."]), got)


def turn_lookup(c):
    r = c.r
    n, sym, z, mass = r.choice(T.ELEMENTS)
    key = r.choice([n, n.lower(), sym])
    ask = r.randrange(3)
    q = [f"What is the atomic number of {key}?", f"What is the atomic mass of {key}?",
         f"Tell me about the element {key}."][ask]
    c.user(q)
    c.tool_round([("lookup_element", {"name": key})])
    if ask == 0:
        c.answer(f"{n} ({sym}) has atomic number {z}.", str(z))
    elif ask == 1:
        c.answer(f"The atomic mass of {n} is {mass}.", mass)
    else:
        c.answer(f"{n} has the symbol {sym}, atomic number {z} and atomic mass {mass}.", sym)


def turn_lookup_missing(c):
    r = c.r
    key = r.choice(["Unobtainium", "Kryptonite", "Mithril", "Adamantium", "Vibranium"])
    c.user(f"What is the atomic number of {key}?")
    c.tool_round([("lookup_element", {"name": key})])
    c.answer(f"I could not find an element named {key}.", "could not find")


def turn_files(c):
    r = c.r
    if c.files is None:
        c.files = make_sandbox(r)
    files = c.files
    dirs = sorted({f.split("/")[0] for f in files if "/" in f})
    k = r.randrange(6)
    if k == 0:
        c.user(r.choice(["What files do I have?", "List my files.", "What is in the sandbox?",
                         "Show me the files."]))
        (res,) = c.tool_round([("list_files", {"path": "."})])
        names = res.split("\n")
        c.answer("You have: " + ", ".join(names) + ".", names[0])
    elif k == 1 and dirs:
        d = r.choice(dirs)
        c.user(r.choice([f"What is in the {d} folder?", f"List the files in {d}.",
                         f"Which files are in {d}/?"]))
        (res,) = c.tool_round([("list_files", {"path": d})])
        names = res.split("\n")
        c.answer(f"The {d} folder has: " + ", ".join(names) + ".", names[0])
    elif k == 2:
        f = r.choice(sorted(files))
        c.user(r.choice([f"What does {f} say?", f"Read {f}.", f"Show me {f}.",
                         f"What is in the file {f}?"]))
        (res,) = c.tool_round([("read_file", {"path": f})])
        c.answer(f"{f} contains:\n{res}", res.split("\n")[0])
    elif k == 3 and dirs:
        # Two steps: list a folder, then read its first file.
        d = r.choice(dirs)
        c.user(f"Read the first file in the {d} folder.")
        (res,) = c.tool_round([("list_files", {"path": d})])
        first = res.split("\n")[0]
        (text,) = c.tool_round([("read_file", {"path": f"{d}/{first}"})])
        c.answer(f"{d}/{first} contains:\n{text}", text.split("\n")[0])
    elif k == 4:
        # Read numbers, then add them with the calculator.
        f = r.choice(["numbers.txt"] + [x for x in files if x.endswith(".csv")])
        if f not in files:
            files[f] = file_text(r, f)
        c.user(r.choice([f"Add up the numbers in {f}.", f"What is the total of the numbers in {f}?"]))
        (text,) = c.tool_round([("read_file", {"path": f})])
        e = " + ".join(text.split("\n"))
        (v,) = c.tool_round([("calculator", {"expression": e})])
        c.answer(f"The numbers in {f} add up to {v}.", v)
    else:
        missing = r.choice(["secret.txt", "passwords.txt", "docs/missing.md", "old/log.txt"])
        c.user(f"Open {missing}.")
        (res,) = c.tool_round([("read_file", {"path": missing})])
        c.answer(f"There is no file {missing} in the sandbox.", "no file")


SMALL_TALK = [
    ("Hi!", "Hello! I can do arithmetic, convert units, look up chemical elements and read "
            "your files. What do you need?"),
    ("Hello", "Hi! Ask me to calculate something, convert a unit, look up an element or "
              "read a file."),
    ("Who are you?", "I am the Strata demo assistant, a small model running inside Strata. "
                     "I answer with the help of tools."),
    ("What can you do?", "I can calculate, convert units, look up chemical elements, and "
                         "list and read files in the sandbox."),
    ("Thanks!", "You're welcome!"),
    ("Thank you.", "Glad to help."),
    ("What is Strata?", "Strata is an embeddable C++ inference engine with a C API; I run "
                        "inside it."),
    ("Tell me a joke.", "I only know one: I tried to divide by zero and the calculator "
                        "refused."),
    ("Bye", "Goodbye!"),
    ("How are you?", "I'm fine, thanks. What can I do for you?"),
]


def turn_small_talk(c):
    q, a = c.r.choice(SMALL_TALK)
    c.user(q)
    c.answer(a, a[:16])


TURNS = [(turn_calc, 34), (turn_convert, 12), (turn_lookup, 10), (turn_lookup_missing, 2),
         (turn_files, 24), (turn_small_talk, 8)]


def conversation(r):
    tools = T.SCHEMAS
    if r.random() < 0.15:
        tools = [t for t in T.SCHEMAS if r.random() < 0.6] or [T.SCHEMAS[0]]
    names = {t["function"]["name"] for t in tools}
    c = Conv(r, tools)
    if r.random() < 0.7:
        c.messages.append({"role": "system", "content": T.SYSTEM_PROMPT})
    fns, weights = zip(*TURNS)
    for _ in range(r.choice([1, 1, 2, 2, 3])):
        fn = r.choices(fns, weights)[0]
        needs = {turn_calc: {"calculator"}, turn_convert: {"convert_units"},
                 turn_lookup: {"lookup_element"}, turn_lookup_missing: {"lookup_element"},
                 turn_files: {"list_files", "read_file", "calculator"},
                 turn_small_talk: set()}[fn]
        if not needs <= names:
            fn = turn_small_talk
        fn(c)
    return {"messages": c.messages, "tools": tools, "expect": c.expect, "files": c.files or {}}


# ---------------------------------------------------------------------------
# plain text


def plain_documents(limit_bytes, r):
    """Docstrings and comment blocks of the standard library's .py files."""
    root = sysconfig.get_paths()["stdlib"]
    paths = []
    for d, subdirs, files in os.walk(root):
        subdirs[:] = sorted(s for s in subdirs if s not in ("site-packages", "test", "tests",
                                                             "idlelib", "__pycache__"))
        paths += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
    r.shuffle(paths)
    out, total = [], 0
    for p in paths:
        try:
            src = open(p, encoding="utf-8").read()
            tree = ast.parse(src)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and 80 <= len(doc) <= 4000 and doc.isascii():
                    head = "" if isinstance(node, ast.Module) else f"{node.name}: "
                    out.append(head + doc)
                    total += len(doc)
        if total >= limit_bytes:
            break
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=60000)
    ap.add_argument("--eval", type=int, default=500)
    ap.add_argument("--plain-mb", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--random-names", type=float, default=0.0,
                    help="probability of a made-up directory/file name or file word (0: the "
                         "closed word lists, as the committed strata-demo was trained)")
    args = ap.parse_args()
    global RANDOM_NAMES
    RANDOM_NAMES = args.random_names
    os.makedirs(args.out, exist_ok=True)
    for name, n, seed in (("train", args.train, args.seed), ("eval", args.eval, args.seed + 1000)):
        r = random.Random(seed)
        with open(os.path.join(args.out, f"{name}.jsonl"), "w") as f:
            for _ in range(n):
                f.write(json.dumps(conversation(r), ensure_ascii=False) + "\n")
    r = random.Random(args.seed + 2000)
    docs = plain_documents(int(args.plain_mb * 1e6), r)
    with open(os.path.join(args.out, "plain.jsonl"), "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    print(f"{args.out}: {args.train} train, {args.eval} eval conversations, "
          f"{len(docs)} plain documents")


if __name__ == "__main__":
    main()
