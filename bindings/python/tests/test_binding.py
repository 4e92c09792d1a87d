"""Drives libstrata through the Python binding: python3 test_binding.py LIBSTRATA MODEL_DIR.

Prints 'N passed, M failed' and exits non-zero on any failure."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import strata  # noqa: E402

passed = failed = 0


def check(name, cond):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", name)


def main():
    strata.library(sys.argv[1])
    model_dir = sys.argv[2]
    check("abi version is 1", strata.library().strata_abi_version() == 1)
    engine = strata.Engine()
    try:
        engine.load_model("/nonexistent/model")
        check("missing model raises", False)
    except strata.StrataError as e:
        check("missing model error names the path", "/nonexistent/model" in e.message)
    model = engine.load_model(model_dir)
    info = model.info()
    check("architecture", info["architecture"] == "kimi_linear")
    check("vocab positive", info["vocab_size"] > 0)
    s = model.session()
    s.append([1, 2, 3])
    logits = s.logits()
    check("logits length", len(logits) == info["vocab_size"])
    check("logits finite and not constant", all(abs(x) < 1e30 for x in logits) and max(logits) > min(logits))
    s.close()
    a = model.session()
    greedy1, _ = a.generate([1, 2, 3], max_tokens=8)
    a.close()
    b = model.session()
    greedy2, _ = b.generate([1, 2, 3], max_tokens=8)
    b.close()
    check("greedy reproducible", greedy1 == greedy2 and len(greedy1) > 0)
    c = model.session()
    streamed = []
    sampled1, _ = c.generate([4, 5], max_tokens=8, temperature=1.0, seed=7, on_token=streamed.append)
    c.close()
    d = model.session()
    sampled2, _ = d.generate([4, 5], max_tokens=8, temperature=1.0, seed=7)
    d.close()
    check("seeded sampling reproducible", sampled1 == sampled2)
    check("streaming delivers every token", streamed == sampled1)
    e = model.session()
    try:
        e.append([info["vocab_size"] + 5])
        check("out-of-vocabulary id raises", False)
    except strata.StrataError as err:
        check("out-of-vocabulary id raises", err.status != 0)
    finally:
        e.close()
    tok = model.tokenizer()
    text = "Hello <|im_start|>world, caf\u00e9 \U0001F600"
    ids = tok.encode(text)
    check("tokenizer round trip", tok.decode(ids) == text and len(ids) > 3)
    check("special token literal is one id", len(tok.encode("<|im_start|>")) == 1)
    tok.close()
    standalone = strata.Tokenizer(model_dir)
    check("tokenizer_open agrees", standalone.encode(text) == ids)
    standalone.close()
    model.close()
    engine.close()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
