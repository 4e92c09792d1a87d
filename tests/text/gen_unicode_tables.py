#!/usr/bin/env python3
"""Generates src/text/unicode_tables.cc: the Unicode data the normalizers need
(NFC/NFD/NFKC/NFKD, Lowercase, StripAccents), from Python's unicodedata, made
to agree with the reference tokenizers library on every code point.

The reference does not use one Unicode version:
  * Normalization comes from its `unicode-normalization-alignments` crate,
    whose tables predate Unicode 12.1. Against Python's unicodedata 14.0 it
    lacks the canonical decomposition of U+11938 (Unicode 13) and 73
    compatibility decompositions (U+32FF, U+A7F2..U+A7F4, U+AB69, the
    Unicode 14 modifier letters U+10780.., ...), and gives combining class 0
    to some newer marks (e.g. U+08D3, U+1DF7, U+11A34), so it does not
    reorder them. The combining classes are probed from the reference (a mark
    keeps its class only if the reference reorders around it); decompositions
    the reference does not apply are dropped.
  * Lowercase is Rust's char::to_lowercase (the Unicode version of the Rust
    standard library the reference was built with: 16.0 for tokenizers
    0.23): it lowercases 55 code points that Python 3.11's str.lower leaves
    alone; the reference's mapping wins.
  * StripAccents removes what the crate calls combining marks (general
    category M of its Unicode version); the reference wins where Python's
    category differs.
Every difference is counted in the generated file's header, and the result is
checked against the reference for every code point before anything is written
(the live test tokenizer_normalizer_live_test.cc checks the C++ side the same
way). Run with the reference venv (it needs `tokenizers`):
  .venv-ref/bin/python tests/text/gen_unicode_tables.py > src/text/unicode_tables.cc
"""
import sys
import unicodedata

MAX = 0x110000
SEP = "\n"  # a starter that composes with nothing, changes under no normalizer
S_BASE, L_BASE, V_BASE, T_BASE = 0xAC00, 0x1100, 0x1161, 0x11A7
L_COUNT, V_COUNT, T_COUNT = 19, 21, 28
N_COUNT = V_COUNT * T_COUNT
S_COUNT = L_COUNT * N_COUNT


def is_surrogate(c):
    return 0xD800 <= c < 0xE000


def code_points():
    return [c for c in range(MAX) if not is_surrogate(c) and c != ord(SEP)]


def reference_map(normalizer, cps):
    """normalizer applied to each code point alone, batched: {cp: str}."""
    out = {}
    for k in range(0, len(cps), 4096):
        chunk = cps[k:k + 4096]
        res = normalizer.normalize_str(SEP.join(chr(c) for c in chunk)).split(SEP)
        assert len(res) == len(chunk), hex(chunk[0])
        out.update(zip(chunk, res))
    return out


def reference_knows_class(n, c, k):
    """Whether tokenizers' NFC treats c as a non-starter (class k per Python)."""
    q = "q"  # composes with no mark
    if k > 1:
        low = "\u0334"  # class 1: must sort before c
        return n.normalize_str(q + chr(c) + low) == q + low + chr(c)
    high = "\u0305"  # class 230: c (class 1) must sort before it
    return n.normalize_str(q + high + chr(c)) == q + chr(c) + high


def ranges_of(cps):
    ranges = []
    for c in sorted(cps):
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ranges


def main():
    from tokenizers import normalizers
    nfc = normalizers.NFC()
    cps = code_points()
    ref = {name: reference_map(getattr(normalizers, name)(), cps)
           for name in ("NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents")}

    ccc = {}
    for c in cps:
        k = unicodedata.combining(chr(c))
        if k and reference_knows_class(nfc, c, k):
            ccc[c] = k

    # Canonical decompositions (one level), minus those the reference lacks.
    decomp = []  # (cp, first, second or 0)
    canon = {}
    dropped_canon = []
    for c in cps:
        d = unicodedata.decomposition(chr(c))
        if d and not d.startswith("<"):
            if ref["NFD"][c] == chr(c):
                dropped_canon.append(c)
                continue
            parts = [int(x, 16) for x in d.split()]
            assert 1 <= len(parts) <= 2, (hex(c), d)
            decomp.append((c, parts[0], parts[1] if len(parts) == 2 else 0))
            canon[c] = parts

    # Compatibility decompositions: the full (recursive, not yet reordered)
    # expansion wherever it differs from the canonical one.
    compat_raw = {}
    for c in cps:
        d = unicodedata.decomposition(chr(c))
        if d.startswith("<"):
            compat_raw[c] = [int(x, 16) for x in d.split()[1:]]
    dropped_compat = []

    def expand(c, compat):
        if S_BASE <= c < S_BASE + S_COUNT:
            s = c - S_BASE
            out = [L_BASE + s // N_COUNT, V_BASE + (s % N_COUNT) // T_COUNT]
            if s % T_COUNT:
                out.append(T_BASE + s % T_COUNT)
            return out
        m = canon.get(c) or (compat and compat_raw.get(c))
        if not m:
            return [c]
        return [x for p in m for x in expand(p, compat)]

    def reorder(seq):
        seq = list(seq)
        i = 0
        while i < len(seq):
            if ccc.get(seq[i], 0) == 0:
                i += 1
                continue
            j = i
            while j < len(seq) and ccc.get(seq[j], 0):
                j += 1
            seq[i:j] = sorted(seq[i:j], key=lambda x: ccc[x])
            i = j
        return seq

    for c in list(compat_raw):
        if "".join(map(chr, reorder(expand(c, True)))) != ref["NFKD"][c]:
            # The reference does not apply this mapping.
            assert ref["NFKD"][c] == "".join(map(chr, reorder(expand(c, False)))), hex(c)
            dropped_compat.append(c)
            del compat_raw[c]
    compat = []  # (cp, [code points])
    for c in cps:
        e = expand(c, True)
        if e != expand(c, False):
            compat.append((c, e))

    # Primary composites: two-part decompositions whose NFC recomposes to the
    # code point (this excludes composition exclusions and non-starter cases).
    compose = []
    for c, a, b in decomp:
        if b and unicodedata.normalize("NFC", chr(c)) == chr(c) and unicodedata.combining(chr(a)) == 0:
            compose.append((a, b, c))
    pair = {(a, b): c for a, b, c in compose}

    def composed(seq):
        out = []
        starter = -1
        for c in seq:
            cc = ccc.get(c, 0)
            if starter >= 0:
                adjacent = starter + 1 == len(out)
                prev_cc = 0 if adjacent else ccc.get(out[-1], 0)
                if adjacent or (prev_cc != 0 and prev_cc < cc):
                    a = out[starter]
                    comp = 0
                    if L_BASE <= a < L_BASE + L_COUNT and V_BASE <= c < V_BASE + V_COUNT:
                        comp = S_BASE + ((a - L_BASE) * V_COUNT + (c - V_BASE)) * T_COUNT
                    elif (S_BASE <= a < S_BASE + S_COUNT and (a - S_BASE) % T_COUNT == 0
                          and T_BASE < c < T_BASE + T_COUNT):
                        comp = a + (c - T_BASE)
                    else:
                        comp = pair.get((a, c), 0)
                    if comp:
                        out[starter] = comp
                        continue
            if cc == 0:
                starter = len(out)
            out.append(c)
        return out

    # Every code point alone: the tables reproduce the reference exactly.
    for c in cps:
        for name, compat_mode in (("NFD", False), ("NFKD", True)):
            got = "".join(map(chr, reorder(expand(c, compat_mode))))
            assert got == ref[name][c], (name, hex(c), got, ref[name][c])
        for name, compat_mode in (("NFC", False), ("NFKC", True)):
            got = "".join(map(chr, composed(reorder(expand(c, compat_mode)))))
            assert got == ref[name][c], (name, hex(c), got, ref[name][c])

    # Code points that may change under NFC or make a neighbour change: not
    # NFC_QC=Yes, or a non-zero combining class. Everything else is stable.
    seconds = {b for _, b, _ in compose}
    unstable = set(ccc) | seconds
    unstable |= set(c for c in cps if unicodedata.combining(chr(c)))
    unstable |= set(c for c in cps if ref["NFC"][c] != chr(c))
    unstable |= set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))  # Hangul V, T jamo
    assert min(unstable) >= 0x300, hex(min(unstable))
    # NFKC adds every code point with a compatibility mapping.
    nfkc_unstable = unstable | set(c for c, _ in compat) | set(c for c in cps if ref["NFKC"][c] != chr(c))
    assert min(nfkc_unstable) >= 0xA0 and min(c for c, _ in compat) >= 0xA0

    lower = []
    lower_overrides = 0
    for c in cps:
        want = ref["Lowercase"][c]
        if want != chr(c).lower():
            lower_overrides += 1
        if want != chr(c):
            assert 1 <= len(want) <= 2, hex(c)
            lower.append((c, ord(want[0]), ord(want[1]) if len(want) == 2 else 0))
    assert all(c >= 0x80 or ord("A") <= c <= ord("Z") for c, _, _ in lower)
    marks = [c for c in cps if ref["StripAccents"][c] == ""]
    assert min(marks) >= 0x300
    py_marks = set(c for c in cps if unicodedata.category(chr(c)).startswith("M"))
    mark_overrides = len(py_marks.symmetric_difference(marks))
    for c in cps:
        assert ref["StripAccents"][c] in ("", chr(c)), hex(c)

    out = sys.stdout
    out.write("// Generated by tests/text/gen_unicode_tables.py from Python's unicodedata %s,\n"
              "// made to agree with the reference tokenizers library on every code point: do\n"
              "// not edit. Overridden by the reference: %d canonical and %d compatibility\n"
              "// decompositions it lacks (%s), %d combining classes,\n"
              "// %d lowercase mappings (Rust char::to_lowercase), %d combining marks.\n"
              "// Data: combining classes, one-level canonical decompositions, primary\n"
              "// composites, full compatibility decompositions, the code points NFC and NFKC\n"
              "// may change, lowercase mappings and combining marks.\n"
              % (unicodedata.unidata_version, len(dropped_canon), len(dropped_compat),
                 ", ".join("U+%04X" % c for c in (dropped_canon + dropped_compat)[:4]) + ", ...",
                 sum(1 for c in cps if unicodedata.combining(chr(c))) - len(ccc),
                 lower_overrides, mark_overrides))
    out.write('#include "text/unicode_tables.h"\n\nnamespace strata::text {\n\n')
    out.write("const CccEntry kCccTable[] = {\n")
    for c in sorted(ccc):
        out.write("    {0x%X, %d},\n" % (c, ccc[c]))
    out.write("};\nconst size_t kCccTableSize = sizeof(kCccTable) / sizeof(kCccTable[0]);\n\n")
    out.write("const DecompEntry kDecompTable[] = {\n")
    for c, a, b in decomp:
        out.write("    {0x%X, 0x%X, 0x%X},\n" % (c, a, b))
    out.write("};\nconst size_t kDecompTableSize = sizeof(kDecompTable) / sizeof(kDecompTable[0]);\n\n")
    out.write("const ComposeEntry kComposeTable[] = {\n")
    for a, b, c in compose:
        out.write("    {0x%X, 0x%X, 0x%X},\n" % (a, b, c))
    out.write("};\nconst size_t kComposeTableSize = sizeof(kComposeTable) / sizeof(kComposeTable[0]);\n\n")

    def write_ranges(name, cps_set):
        out.write("const RangeEntry %s[] = {\n" % name)
        for a, b in ranges_of(cps_set):
            out.write("    {0x%X, 0x%X},\n" % (a, b))
        out.write("};\nconst size_t %sSize =\n    sizeof(%s) / sizeof(%s[0]);\n\n" % (name, name, name))

    write_ranges("kNfcUnstableRanges", unstable)
    write_ranges("kNfkcUnstableRanges", nfkc_unstable)

    out.write("const uint32_t kCompatData[] = {\n")
    offsets = []
    pos = 0
    for c, e in compat:
        offsets.append((c, pos, len(e)))
        for k in range(0, len(e), 8):
            out.write("    " + " ".join("0x%X," % x for x in e[k:k + 8]) + "\n")
        pos += len(e)
    out.write("};\n\n")
    out.write("const MappingEntry kCompatTable[] = {\n")
    for c, p, n in offsets:
        out.write("    {0x%X, %d, %d},\n" % (c, p, n))
    out.write("};\nconst size_t kCompatTableSize = sizeof(kCompatTable) / sizeof(kCompatTable[0]);\n\n")
    out.write("const DecompEntry kLowercaseTable[] = {\n")
    for c, a, b in lower:
        out.write("    {0x%X, 0x%X, 0x%X},\n" % (c, a, b))
    out.write("};\nconst size_t kLowercaseTableSize =\n    sizeof(kLowercaseTable) / sizeof(kLowercaseTable[0]);\n\n")
    write_ranges("kCombiningMarkRanges", marks)
    out.write("}  // namespace strata::text\n")


if __name__ == "__main__":
    main()
