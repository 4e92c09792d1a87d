"""The demo model's tools: their schemas (exactly what samples/agent registers,
key order included, since the chat template prints them with tojson) and
reference implementations whose output text the agent app reproduces byte for
byte, so what the model reads in training is what it reads in the app.

  calculator(expression)            + - * / and parentheses on decimal numbers,
                                    IEEE double, printed with %.12g
  convert_units(from_unit, to_unit, value)
  lookup_element(name)              a row of the small table ELEMENTS
  list_files(path)                  names in a sandbox directory, one a line,
                                    directories with a trailing '/'
  read_file(path)                   the text of a sandbox file
Errors are returned as "error: <reason>" results.
"""
import json

SCHEMAS = [
    {"type": "function", "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
        "parameters": {"type": "object", "properties": {
            "expression": {"type": "string", "description": "for example (2 + 3) * 4.5"}},
            "required": ["expression"]}}},
    {"type": "function", "function": {
        "name": "convert_units",
        "description": "Convert a value between units of length, mass, volume or temperature.",
        "parameters": {"type": "object", "properties": {
            "value": {"type": "number"},
            "from_unit": {"type": "string"},
            "to_unit": {"type": "string"}},
            "required": ["value", "from_unit", "to_unit"]}}},
    {"type": "function", "function": {
        "name": "lookup_element",
        "description": "Look up a chemical element by name or symbol.",
        "parameters": {"type": "object", "properties": {
            "name": {"type": "string"}},
            "required": ["name"]}}},
    {"type": "function", "function": {
        "name": "list_files",
        "description": "List the files in a directory of the sandbox.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "directory, . for the top"}},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "read_file",
        "description": "Read a text file of the sandbox.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}},
            "required": ["path"]}}},
]
TOOL_NAMES = [s["function"]["name"] for s in SCHEMAS]

SYSTEM_PROMPT = ("You are the Strata demo assistant. Use the tools for arithmetic, unit "
                 "conversions, chemical elements and files; answer from their results.")

# ---------------------------------------------------------------------------
# calculator


class CalcError(Exception):
    pass


def _tokens(expr):
    out, i = [], 0
    while i < len(expr):
        c = expr[i]
        if c in " \t":
            i += 1
        elif c in "+-*/()":
            out.append(c)
            i += 1
        elif c.isdigit() or c == ".":
            j = i
            while j < len(expr) and (expr[j].isdigit() or expr[j] == "."):
                j += 1
            text = expr[i:j]
            if text.count(".") > 1 or text == ".":
                raise CalcError(f"bad number '{text}'")
            out.append(float(text))
            i = j
        else:
            raise CalcError(f"unexpected '{c}'")
    return out


def calculate(expr):
    """Recursive descent, left-associative, unary minus; the same grammar and
    evaluation order as samples/agent/calculator.c."""
    toks = _tokens(expr)
    pos = [0]

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else None

    def take():
        t = peek()
        pos[0] += 1
        return t

    def primary():
        t = take()
        if t == "-":
            return -primary()
        if t == "(":
            v = expression()
            if take() != ")":
                raise CalcError("missing )")
            return v
        if isinstance(t, float):
            return t
        raise CalcError("expected a number")

    def term():
        v = primary()
        while peek() in ("*", "/"):
            op = take()
            r = primary()
            if op == "*":
                v = v * r
            else:
                if r == 0:
                    raise CalcError("division by zero")
                v = v / r
        return v

    def expression():
        v = term()
        while peek() in ("+", "-"):
            op = take()
            r = term()
            v = v + r if op == "+" else v - r
        return v

    if not toks:
        raise CalcError("empty expression")
    v = expression()
    if pos[0] != len(toks):
        raise CalcError("unexpected input after the expression")
    return format_number(v)


def format_number(v):
    s = "%.12g" % v
    return "0" if s == "-0" else s


def run_calculator(args):
    try:
        return calculate(str(args.get("expression", "")))
    except CalcError as e:
        return f"error: {e}"


# ---------------------------------------------------------------------------
# convert_units: factor to the base unit (m, kg, l); temperatures apart.

UNITS = {
    "mm": ("length", 0.001), "cm": ("length", 0.01), "m": ("length", 1.0),
    "km": ("length", 1000.0), "in": ("length", 0.0254), "ft": ("length", 0.3048),
    "mi": ("length", 1609.344),
    "g": ("mass", 0.001), "kg": ("mass", 1.0), "lb": ("mass", 0.45359237),
    "oz": ("mass", 0.028349523125),
    "ml": ("volume", 0.001), "l": ("volume", 1.0), "gal": ("volume", 3.785411784),
    "C": ("temperature", None), "F": ("temperature", None), "K": ("temperature", None),
}


def convert(value, frm, to):
    if frm not in UNITS or to not in UNITS:
        bad = frm if frm not in UNITS else to
        return f"error: unknown unit '{bad}'"
    if UNITS[frm][0] != UNITS[to][0]:
        return f"error: cannot convert {UNITS[frm][0]} to {UNITS[to][0]}"
    if UNITS[frm][0] == "temperature":
        c = value if frm == "C" else (value - 32) * 5 / 9 if frm == "F" else value - 273.15
        r = c if to == "C" else c * 9 / 5 + 32 if to == "F" else c + 273.15
    else:
        r = value * UNITS[frm][1] / UNITS[to][1]
    return f"{format_number(value)} {frm} = {'%.6g' % r} {to}"


def run_convert(args):
    v = args.get("value")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "error: value must be a number"
    return convert(float(v), str(args.get("from_unit", "")), str(args.get("to_unit", "")))


# ---------------------------------------------------------------------------
# lookup_element

ELEMENTS = [
    ("Hydrogen", "H", 1, "1.008"), ("Helium", "He", 2, "4.0026"), ("Lithium", "Li", 3, "6.94"),
    ("Carbon", "C", 6, "12.011"), ("Nitrogen", "N", 7, "14.007"), ("Oxygen", "O", 8, "15.999"),
    ("Neon", "Ne", 10, "20.180"), ("Sodium", "Na", 11, "22.990"),
    ("Magnesium", "Mg", 12, "24.305"), ("Aluminium", "Al", 13, "26.982"),
    ("Silicon", "Si", 14, "28.085"), ("Sulfur", "S", 16, "32.06"),
    ("Chlorine", "Cl", 17, "35.45"), ("Potassium", "K", 19, "39.098"),
    ("Calcium", "Ca", 20, "40.078"), ("Iron", "Fe", 26, "55.845"), ("Copper", "Cu", 29, "63.546"),
    ("Zinc", "Zn", 30, "65.38"), ("Silver", "Ag", 47, "107.87"), ("Tin", "Sn", 50, "118.71"),
    ("Gold", "Au", 79, "196.97"), ("Mercury", "Hg", 80, "200.59"), ("Lead", "Pb", 82, "207.2"),
    ("Uranium", "U", 92, "238.03"),
]


def lookup(name):
    key = name.strip().lower()
    for n, sym, z, mass in ELEMENTS:
        if key in (n.lower(), sym.lower()):
            return f"name: {n}, symbol: {sym}, atomic number: {z}, atomic mass: {mass}"
    return f"error: no element named '{name}'"


def run_lookup(args):
    return lookup(str(args.get("name", "")))


# ---------------------------------------------------------------------------
# sandbox files: a dict {path: text} with '/' separators, no leading './'


def normalize(path):
    parts = [p for p in str(path).split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    return "/".join(parts)


def list_files(files, path):
    d = normalize(path)
    if d is None:
        return "error: path outside the sandbox"
    prefix = d + "/" if d else ""
    names = set()
    for f in files:
        if f.startswith(prefix):
            rest = f[len(prefix):]
            names.add(rest.split("/")[0] + ("/" if "/" in rest else ""))
    if not names:
        return f"error: no such directory: {path}"
    return "\n".join(sorted(names))


def read_file(files, path):
    p = normalize(path)
    if p is None:
        return "error: path outside the sandbox"
    if p not in files:
        return f"error: no such file: {path}"
    return files[p]


def run_tool(name, args, files=None):
    if name == "calculator":
        return run_calculator(args)
    if name == "convert_units":
        return run_convert(args)
    if name == "lookup_element":
        return run_lookup(args)
    if name == "list_files":
        return list_files(files or {}, args.get("path", "."))
    if name == "read_file":
        return read_file(files or {}, args.get("path", ""))
    return f"error: unknown tool '{name}'"


def canonical_args(args):
    """Arguments as Strata's tool-call parser re-emits them: keys sorted, no spaces."""
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
