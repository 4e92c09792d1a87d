"""Drives libstrata through the Python binding:

    python3 test_binding.py LIBSTRATA MODEL_DIR [TRAINED_MODEL_DIR]

MODEL_DIR is the demo model of capi_make_demo_model (random weights, demo
tokenizer); TRAINED_MODEL_DIR (default: the repository's models/strata-demo) is
the trained model, whose tool calls drive the tool-callback tests. ctest runs
this under PYTHONMALLOC=malloc, so Python's own objects live in malloc'd blocks
where a write past a ctypes struct corrupts the heap (or, in an ASan build,
is reported) instead of landing silently in a pymalloc arena.

Prints 'N passed, M failed' and exits non-zero on any failure. Nothing is
skipped: a missing model is a failure."""
import contextlib
import ctypes
import gc
import os
import re
import sys
import traceback
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tools", "demo_model"))
import strata  # noqa: E402
import tools as demo_tools  # noqa: E402  (the trained model's tool schemas and reference implementations)

passed = failed = 0


def check(name, cond):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", name)


def raises(fn, kind):
    """The exception of type `kind` that fn() raises, or None (also when it raises nothing)."""
    try:
        fn()
    except kind as e:
        return e
    return None


def raised_in(error, function_name):
    """Whether the traceback of `error` passes through `function_name` (the callback that raised it)."""
    return any(frame.name == function_name for frame in traceback.extract_tb(error.__traceback__))


def noted(error, text):
    return any(text in note for note in getattr(error, "__notes__", [text]))


class Boom(Exception):
    pass


class Ctx:
    lib_path = model_dir = trained_dir = None


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def closes_cleanly(engine, what):
    # strata_engine_destroy refuses while any model, session or request of the engine exists, so a
    # clean close proves that the callback paths left no handle behind.
    error = raises(engine.close, strata.StrataError)
    check(f"{what}: the engine closes (no handle left)", error is None)


@contextlib.contextmanager
def loaded(model_dir, what):
    """A model on its own engine; afterwards both close, and the engine's close proves nothing is left."""
    engine = strata.Engine()
    model = engine.load_model(model_dir)
    try:
        yield model
    finally:
        model.close()
        closes_cleanly(engine, what)


# ---------------------------------------------------------------------------
# Struct layouts


class _OldRequestParams(ctypes.Structure):
    """The binding's strata_request_params before the fix: 80 bytes, the C struct is 104."""
    _fields_ = [f for f in strata._RequestParams._fields_
                if f[0] not in ("priority", "deadline_ms", "max_context_tokens")]


def _fake(fields):
    return type("Fake", (ctypes.Structure,), {"_fields_": fields})


@test
def test_layouts(ctx):
    lib = strata.library()
    check("every mirrored struct matches the library", raises(lambda: strata.check_layouts(lib),
                                                               strata.LayoutError) is None)
    with open(os.path.join(REPO, "include", "strata", "strata.h")) as f:
        public = set(re.findall(r"typedef struct (strata_\w+) \{", f.read()))
    mirrored = {s._strata_name_ for s in strata.STRUCTS}
    check(f"the binding mirrors every public struct (missing: {sorted(public - mirrored)})", public == mirrored)

    fields = strata._RequestParams._fields_
    name = "strata_request_params"
    e = raises(lambda: strata.check_layout(lib, _OldRequestParams, name), strata.LayoutError)
    check("the old 80-byte request params are refused", e is not None and "80 bytes" in str(e)
          and "104 in libstrata" in str(e))
    no_priority = _fake([f for f in fields if f[0] != "priority"])
    e = raises(lambda: strata.check_layout(lib, no_priority, name), strata.LayoutError)
    check("a missing middle field names the struct and the first shifted field",
          e is not None and "strata_request_params.deadline_ms: offset 80 in the binding, 88 in libstrata" in str(e))
    no_last = _fake(fields[:-1])
    e = raises(lambda: strata.check_layout(lib, no_last, name), strata.LayoutError)
    check("a missing last field is a size difference naming the struct",
          e is not None and "strata_request_params: 96 bytes in the binding, 104 in libstrata" in str(e))
    narrow = _fake([(n, ctypes.c_uint32 if n == "num_stop_tokens" else t) for n, t in fields])
    e = raises(lambda: strata.check_layout(lib, narrow, name), strata.LayoutError)
    check("a field of the wrong width shifts the next one", e is not None
          and "strata_request_params.stop_at_eos: offset 20 in the binding, 24 in libstrata" in str(e))
    extra = _fake(fields + [("bogus", ctypes.c_int32)])
    e = raises(lambda: strata.check_layout(lib, extra, name), strata.LayoutError)
    check("a field the library lacks is named", e is not None and "strata_request_params.bogus" in str(e)
          and "unknown to libstrata" in str(e))
    e = raises(lambda: strata.check_layout(lib, strata._Tool, "strata_no_such_struct"), strata.LayoutError)
    check("an unknown struct is refused", e is not None and "strata_no_such_struct" in str(e))

    # Loading the library runs the check: with a stale struct among the mirrored ones it refuses.
    saved = strata.STRUCTS
    stale = type("StaleTool", (ctypes.Structure,), {"_strata_name_": "strata_tool",
                                                    "_fields_": strata._Tool._fields_[:-1]})
    strata.STRUCTS, strata._lib = saved + (stale,), None
    try:
        e = raises(lambda: strata.library(ctx.lib_path), strata.LayoutError)
        check("library() refuses a binding whose struct differs", e is not None and "strata_tool" in str(e))
        check("and stays unloaded", strata._lib is None)
    finally:
        strata.STRUCTS = saved
        strata.library(ctx.lib_path)


@test
def test_init_writes_only_own_size(ctx):
    # The original bug: the library's init wrote its own sizeof into a shorter Python struct. Now the
    # binding passes its own size; bytes past it must stay untouched.
    lib = strata.library()
    for struct, fn in strata._INIT_FUNCTIONS.items():
        size = ctypes.sizeof(struct)
        buf = (ctypes.c_ubyte * (size + 64))(*([0xA5] * (size + 64)))
        status = getattr(lib, fn)(ctypes.cast(buf, ctypes.POINTER(struct)), size)
        check(f"{fn} succeeds", status == strata.STRATA_OK)
        check(f"{fn} sets struct_size", struct.from_buffer(buf).struct_size == size)
        check(f"{fn} writes nothing past sizeof", all(b == 0xA5 for b in buf[size:]))
        small = (ctypes.c_ubyte * size)(*([0xA5] * size))
        status = getattr(lib, fn)(ctypes.cast(small, ctypes.POINTER(struct)), 4)
        check(f"{fn} refuses a size below the first layout and writes nothing",
              status == strata.STRATA_ERR_INVALID_ARGUMENT and all(b == 0xA5 for b in small))


# ---------------------------------------------------------------------------
# The model, sessions and the tokenizer


@test
def test_model_and_generation(ctx):
    check("abi version is 1", strata.library().strata_abi_version() == 1)
    engine = strata.Engine()
    e = raises(lambda: engine.load_model("/nonexistent/model"), strata.StrataError)
    check("missing model error names the path", e is not None and "/nonexistent/model" in e.message)
    model = engine.load_model(ctx.model_dir)
    info = model.info()
    check("architecture", info["architecture"] == "kimi_linear")
    check("vocab positive", info["vocab_size"] > 0)
    s = model.session()
    s.append([1, 2, 3])
    logits = s.logits()
    check("logits length", len(logits) == info["vocab_size"])
    check("logits finite and not constant", all(abs(x) < 1e30 for x in logits) and max(logits) > min(logits))
    check("session counts its tokens", s.num_tokens() == 3)
    s.reset()
    check("reset empties the session", s.num_tokens() == 0)
    s.close()
    a = model.session()
    greedy1, _ = a.generate([1, 2, 3], max_tokens=8)
    a.close()
    b = model.session()
    greedy2, reason = b.generate([1, 2, 3], max_tokens=8)
    b.close()
    check("greedy reproducible", greedy1 == greedy2 and len(greedy1) > 0)
    check("max_tokens ends the generation", reason == strata.FINISH_MAX_TOKENS and len(greedy2) == 8)
    c = model.session()
    streamed = []
    sampled1, _ = c.generate([4, 5], max_tokens=8, temperature=1.0, seed=7, on_token=streamed.append)
    c.close()
    d = model.session()
    sampled2, _ = d.generate([4, 5], max_tokens=8, temperature=1.0, seed=7)
    d.close()
    check("seeded sampling reproducible", sampled1 == sampled2)
    check("streaming delivers every token", streamed == sampled1)
    with model.session() as s:
        out, reason = s.generate([1, 2, 3], max_tokens=8, stop_tokens=[greedy1[0]], stop_at_eos=False,
                                 repetition_penalty=1.0, priority=1)
        # The stop token ends the request in its FINISHED event, not as a TOKEN.
        check("stop_tokens reach the library", reason == strata.FINISH_STOP_TOKEN and out == [])
        check("an unknown generate option is refused",
              raises(lambda: s.generate([1], bogus=1), TypeError) is not None)
    with model.session(max_context_tokens=16) as s:
        out, reason = s.generate([1, 2, 3], max_tokens=0)
        check("session max_context_tokens reaches the library",
              reason == strata.FINISH_CONTEXT_FULL and s.num_tokens() == 16)
    e_session = model.session()
    err = raises(lambda: e_session.append([info["vocab_size"] + 5]), strata.StrataError)
    check("out-of-vocabulary id raises", err is not None and err.status == strata.STRATA_ERR_OUT_OF_RANGE)
    e_session.close()
    tok = model.tokenizer()
    text = "Hello <|im_start|>world, caf\u00e9 \U0001F600"
    ids = tok.encode(text)
    check("tokenizer round trip", tok.decode(ids) == text and len(ids) > 3)
    check("special token literal is one id", len(tok.encode("<|im_start|>")) == 1)
    tok.close()
    standalone = strata.Tokenizer(ctx.model_dir)
    check("tokenizer_open agrees", standalone.encode(text) == ids)
    standalone.close()
    model.close()
    closes_cleanly(engine, "generation")


@test
def test_saved_sessions(ctx):
    import tempfile
    engine = strata.Engine()
    model = engine.load_model(ctx.model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.session")
        with model.session() as s:
            s.generate(list(range(1, 80)), max_tokens=5)
            s.save(path)
            data = s.to_bytes()
            want, _ = s.generate([7, 8, 9], max_tokens=6)
            want_logits = s.logits()
        check("to_bytes gives the saved-session format", data[:8] == b"STRATASN" and len(data) > 56)
        for load in (lambda: strata.Session.load(model, path), lambda: strata.Session.from_bytes(model, data)):
            with load() as t:
                check("a loaded session has the saved history", t.num_tokens() == 84)
                got, _ = t.generate([7, 8, 9], max_tokens=6)
                check("a loaded session continues as the saved one", got == want and t.logits() == want_logits)
        bad = bytearray(data)
        bad[len(bad) // 2] ^= 0x40
        e = raises(lambda: strata.Session.from_bytes(model, bytes(bad)), strata.StrataError)
        check("damaged bytes raise DATA_LOSS naming the checksum",
              e is not None and e.status == strata.STRATA_ERR_DATA_LOSS and "SHA-256" in e.message)
        e = raises(lambda: strata.Session.load(model, os.path.join(tmp, "missing")), strata.StrataError)
        check("a missing file raises NOT_FOUND", e is not None and e.status == strata.STRATA_ERR_NOT_FOUND)
        e = raises(lambda: strata.Session.load(model, path, max_context_tokens=8), strata.StrataError)
        check("a context too small raises OUT_OF_RANGE", e is not None and e.status == strata.STRATA_ERR_OUT_OF_RANGE)
    model.close()
    closes_cleanly(engine, "saved sessions")


@test
def test_engine_params_and_stats(ctx):
    e = raises(lambda: strata.Engine(options="scheduler.no_such_knob=1"), strata.StrataError)
    check("an unknown engine option is refused by name", e is not None
          and e.status == strata.STRATA_ERR_INVALID_ARGUMENT and "scheduler.no_such_knob" in e.message)
    engine = strata.Engine(num_threads=2, max_batch=4, options="scheduler.prefill_chunk_tokens=64")
    with engine.load_model(ctx.model_dir) as model, model.session() as s:
        s.generate([1, 2, 3], max_tokens=4)
    metrics = engine.metrics()
    check("metrics count the request", metrics["requests_submitted"] == 1 and metrics["requests_finished"] == 1)
    check("metrics carry latencies", metrics["ttft"]["count"] == 1 and metrics["tpot"]["count"] >= 1)
    check("a stat equals its metrics field", engine.stat("requests.submitted") == 1)
    stats = engine.stats()
    check("stats list the scheduler diagnostics", "scheduler.iterations" in stats and stats["scheduler.iterations"] > 0)
    e = raises(lambda: engine.stat("no.such.stat"), strata.StrataError)
    check("an unknown stat is NOT_FOUND", e is not None and e.status == strata.STRATA_ERR_NOT_FOUND)
    closes_cleanly(engine, "stats")


@test
def test_devices_and_plan(ctx):
    engine = strata.Engine()
    with engine.load_model(ctx.model_dir, device="cpu") as m:
        info = m.info()
        check("device cpu runs on the cpu without notice", info["device"] == "cpu" and info["device_notice"] == "")
    with engine.load_model(ctx.model_dir) as m:
        info = m.info()
        check("device auto lands on the cpu with a notice, or on a GPU",
              (info["device"] == "cpu" and info["device_notice"] != "") or info["device"].startswith("cuda:"))
    try:
        with engine.load_model(ctx.model_dir, device="cuda", device_index=0) as m:
            check("device cuda runs on a GPU", m.info()["device"].startswith("cuda:0"))
    except strata.StrataError as e:
        check("device cuda without a usable GPU is UNAVAILABLE, saying why",
              e.status == strata.STRATA_ERR_UNAVAILABLE and e.message != "")
    check("an unknown device is a ValueError", raises(lambda: engine.load_model(ctx.model_dir, device="tpu"),
                                                      ValueError) is not None)
    e = raises(lambda: engine.load_model(ctx.model_dir, device_index=-1), strata.StrataError)
    check("a negative device_index is refused", e is not None and e.status == strata.STRATA_ERR_INVALID_ARGUMENT)
    e = raises(lambda: engine.load_model(ctx.model_dir, gpu_memory_fraction=1.5), strata.StrataError)
    check("gpu_memory_fraction out of range is refused by name",
          e is not None and "gpu_memory_fraction" in e.message)
    with engine.load_model(ctx.model_dir, device="cpu", max_batch=4, max_sequences=8, max_context_tokens=256,
                           prefill_slice_tokens=64, gpu_memory_fraction=0.5, cuda_graphs=False,
                           batch_invariant=True) as m:
        check("the GPU plan fields load on the cpu", m.info()["device"] == "cpu")
    with engine.load_model(ctx.model_dir, device="cpu", dummy_weights=True, dummy_seed=3) as m, \
            engine.load_model(ctx.model_dir, device="cpu") as real:
        with m.session() as a, real.session() as b:
            a.append([1, 2, 3])
            b.append([1, 2, 3])
            check("dummy weights compute other logits", a.logits() != b.logits())
    closes_cleanly(engine, "devices")


# ---------------------------------------------------------------------------
# Exceptions in callbacks


@test
def test_progress_callback(ctx):
    engine = strata.Engine()
    fractions = []
    with engine.load_model(ctx.model_dir, on_progress=fractions.append):
        pass
    check("progress is reported, non-decreasing, ending at 1",
          fractions and fractions == sorted(fractions) and fractions[-1] == 1.0)
    e = raises(lambda: engine.load_model(ctx.model_dir, on_progress=lambda f: True), strata.StrataError)
    check("a true return cancels the load", e is not None and e.status == strata.STRATA_ERR_CANCELLED)
    calls = []
    boom = Boom("progress")

    def on_progress(fraction):
        calls.append(fraction)
        raise boom

    e = raises(lambda: engine.load_model(ctx.model_dir, on_progress=on_progress), Boom)
    check("an exception in on_progress reaches the caller unchanged", e is boom)
    check("with the callback's traceback", e is not None and raised_in(e, "on_progress"))
    check("noting what was stopped", e is not None and noted(e, "strata_model_load"))
    check("and the load stopped at the first report", len(calls) == 1)
    closes_cleanly(engine, "progress")


@test
def test_token_callback(ctx):
    with loaded(ctx.model_dir, "token callback") as model:
        s = model.session()
        seen = []

        def on_token(token):
            seen.append(token)
            if len(seen) == 3:
                raise Boom("token")

        e = raises(lambda: s.generate([1, 2, 3], max_tokens=16, on_token=on_token), Boom)
        check("an exception in on_token reaches the caller", e is not None and str(e) == "token")
        check("with the callback's traceback", e is not None and raised_in(e, "on_token"))
        check("noting what was stopped", e is not None and noted(e, "strata_session_generate"))
        check("the generation stopped at the raise", len(seen) == 3 and s.num_tokens() < 3 + 16)
        out, reason = s.generate([4], max_tokens=4)
        check("the session generates again afterwards", len(out) == 4 and reason == strata.FINISH_MAX_TOKENS)
        out, reason = s.generate([5], max_tokens=8, on_token=lambda t: True)
        check("a true return stops with FINISH_CALLBACK", reason == strata.FINISH_CALLBACK and len(out) == 1)

        def interrupt(token):
            raise KeyboardInterrupt

        check("KeyboardInterrupt in a callback reaches the caller too",
              raises(lambda: s.generate([6], max_tokens=8, on_token=interrupt), KeyboardInterrupt) is not None)
        s.close()


def _ask(s):
    s.add_message("system", demo_tools.SYSTEM_PROMPT)
    s.add_message("user", "What is 12.5 * 8 - 3?")


def _chat_session(model, callback=None):
    """A session with the trained model's tools (`callback(name, arguments)` runs each) and a question that
    it answers with a calculator call."""
    s = model.session()
    for schema in demo_tools.SCHEMAS:
        f = schema["function"]
        tool_cb = None if callback is None else (lambda args, name=f["name"]: callback(name, args))
        s.add_tool(f["name"], f["description"], f["parameters"], tool_cb)
    _ask(s)
    return s


def _recording_tools(calls, raise_first=None):
    """Runs the reference tools, recording each call's name; raises `raise_first` at the first call."""
    def run_tool(name, args):
        calls.append(name)
        if raise_first is not None and len(calls) == 1:
            raise raise_first
        return demo_tools.run_tool(name, args)
    return run_tool


@test
def test_chat_and_tools(ctx):
    with loaded(ctx.trained_dir, "chat") as model:
        calls, events = [], []
        s = _chat_session(model, _recording_tools(calls))
        text, reason = s.chat(max_tokens=256, on_event=events.append, skip_special_tokens=True)
        check("the model calls the calculator through the Python callback", calls == ["calculator"])
        check("the TOOL_CALL event carries the call",
              any(ev.type == strata.EVENT_TOOL_CALL and ev.tool_name == "calculator" and ev.tool_call_id
                  for ev in events))
        check("the answer uses the result", "97" in text)
        check("the turn ends normally", reason in (strata.FINISH_EOS, strata.FINISH_STOP_TOKEN))
        conversation = s.conversation()
        check("the result is a tool message of the conversation",
              any(m.get("role") == "tool" and m.get("content") == "97" for m in conversation))
        s.close()

        # Once the session is closed, the library holds no tool callback: the Python function is freed.
        probe = _recording_tools([])
        probe_ref = weakref.ref(probe)
        s = _chat_session(model, probe)
        s.close()
        del probe
        gc.collect()
        check("close releases the tool callbacks", probe_ref() is None)

        with _chat_session(model) as s:
            text, reason = s.chat(max_tokens=256)
            check("a tool without callback declines the call", reason == strata.FINISH_TOOL_CALLS)


@test
def test_tool_callback_exception(ctx):
    with loaded(ctx.trained_dir, "tool callback") as model:
        calls, events_after = [], []
        boom = Boom("tool")

        def on_event(ev):
            if calls:
                events_after.append(ev)

        s = _chat_session(model, _recording_tools(calls, raise_first=boom))
        e = raises(lambda: s.chat(max_tokens=256, on_event=on_event), Boom)
        check("an exception in a tool callback reaches the caller unchanged", e is boom)
        check("with the callback's traceback", e is not None and raised_in(e, "run_tool"))
        check("noting that the request was stopped", e is not None and noted(e, "strata_session_chat"))
        check("the request ended at the raise: no further Python callback ran",
              len(calls) == 1 and events_after == [])
        s.reset()
        _ask(s)
        text, reason = s.chat(max_tokens=256)
        check("the session chats again afterwards", len(calls) == 2 and "97" in text)
        s.close()


@test
def test_event_callback_exception(ctx):
    with loaded(ctx.trained_dir, "event callback") as model:
        calls, seen = [], []

        def on_event(ev):
            seen.append(ev.type)
            if ev.type == strata.EVENT_TOOL_CALL:
                raise Boom("event")

        s = _chat_session(model, _recording_tools(calls))
        e = raises(lambda: s.chat(max_tokens=256, on_event=on_event), Boom)
        check("an exception in on_event reaches the caller", e is not None and str(e) == "event")
        check("with the callback's traceback", e is not None and raised_in(e, "on_event"))
        check("the request stopped: the tool it was about to call never ran, no event followed",
              calls == [] and seen and seen[-1] == strata.EVENT_TOOL_CALL)
        s.reset()
        s.add_message("user", "Hello")
        text, reason = s.chat(max_tokens=8, on_event=lambda ev: True)
        check("a true return stops with FINISH_CALLBACK", reason == strata.FINISH_CALLBACK)
        s.close()


def main():
    Ctx.lib_path, Ctx.model_dir = sys.argv[1], sys.argv[2]
    Ctx.trained_dir = sys.argv[3] if len(sys.argv) > 3 else os.path.join(REPO, "models", "strata-demo")
    print(f"python {sys.version.split()[0]}, PYTHONMALLOC={os.environ.get('PYTHONMALLOC', '(unset)')}, "
          f"LD_PRELOAD={os.environ.get('LD_PRELOAD', '(unset)')}")
    strata.library(Ctx.lib_path)
    for fn in TESTS:
        try:
            fn(Ctx)
        except BaseException:  # noqa: B902 - one broken test must not hide the others' results
            check(f"{fn.__name__} ran to the end", False)
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
