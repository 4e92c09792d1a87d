"""Python binding for Strata over its C ABI (ctypes, no compiler needed).

Only the stable C ABI of libstrata is used. Every struct this module mirrors is
compared with the library's own layout (strata_abi_struct_size and
strata_abi_field_offset) when the library is loaded, and a difference is a
LayoutError naming the struct and field: a stale copy would otherwise make the
library read or write the wrong bytes of Python's memory.

Errors raise StrataError carrying the status code and the library's message
(which names the file, field or tensor). An exception raised in a Python
callback (token, progress, chat event or tool) stops the C call that runs it and
is raised again, unchanged and with its traceback, by the method that made the
call.

Callbacks that would run on the engine's own threads (log and metrics
callbacks) are not offered: an exception there would have no caller to reach.
"""
import ctypes
import json
import os

STRATA_OK = 0
STRATA_ERR_INVALID_ARGUMENT = 1
STRATA_ERR_NOT_FOUND = 2
STRATA_ERR_OUT_OF_RANGE = 4
STRATA_ERR_FAILED_PRECONDITION = 5
STRATA_ERR_UNAVAILABLE = 7
STRATA_ERR_CANCELLED = 8
STRATA_ERR_UNSUPPORTED = 10
STRATA_ERR_DATA_LOSS = 11
STRATA_ERR_MISUSE = 13

# The ABI major this module mirrors; a library of another major has other layouts.
ABI_VERSION = 1

DEVICES = {"auto": 0, "cpu": 1, "cuda": 2}
ROLES = {"system": 0, "user": 1, "assistant": 2, "tool": 3}

EVENT_NONE, EVENT_TOKEN, EVENT_FINISHED, EVENT_TEXT, EVENT_TOOL_CALL, EVENT_TOOL_ERROR = range(6)

FINISH_NONE = 0
FINISH_EOS = 1
FINISH_STOP_TOKEN = 2
FINISH_MAX_TOKENS = 3
FINISH_CANCELLED = 4
FINISH_ERROR = 5
FINISH_CONTEXT_FULL = 6
FINISH_CALLBACK = 7
FINISH_STOP_STRING = 8
FINISH_TOOL_CALLS = 9
FINISH_DEADLINE = 10


class StrataError(RuntimeError):
    def __init__(self, status, message):
        super().__init__(f"strata error {status}: {message}")
        self.status = status
        self.message = message


class LayoutError(RuntimeError):
    """A struct of this module differs from the loaded libstrata's: using it would corrupt memory."""


# ---------------------------------------------------------------------------
# Structs. Each names the C struct it mirrors in _strata_name_ so that its
# layout can be checked against the library; field names are the header's.

_vp = ctypes.c_void_p


class _Event(ctypes.Structure):
    _strata_name_ = "strata_event"
    _fields_ = [("struct_size", ctypes.c_uint32), ("type", ctypes.c_int32), ("request", _vp),
                ("token", ctypes.c_int32), ("status", ctypes.c_int32), ("finish_reason", ctypes.c_int32),
                ("num_generated_tokens", ctypes.c_uint32), ("text", _vp), ("text_len", ctypes.c_size_t),
                ("tool_call_id", ctypes.c_char_p), ("tool_name", ctypes.c_char_p), ("tool_arguments", _vp),
                ("tool_arguments_len", ctypes.c_size_t)]


_LogCallback = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_char_p, _vp)
_ProgressCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_float, _vp)
_TokenCallback = ctypes.CFUNCTYPE(ctypes.c_int, _vp, ctypes.c_int32, _vp)
_EventCallback = ctypes.CFUNCTYPE(ctypes.c_int, _vp, ctypes.POINTER(_Event), _vp)
_ToolCallback = ctypes.CFUNCTYPE(ctypes.c_int32, _vp, ctypes.POINTER(_Event), _vp)


class _Latency(ctypes.Structure):
    _strata_name_ = "strata_latency"
    _fields_ = [("count", ctypes.c_int64), ("mean_ms", ctypes.c_double), ("p50_ms", ctypes.c_double),
                ("p90_ms", ctypes.c_double), ("p99_ms", ctypes.c_double), ("max_ms", ctypes.c_double)]


class _Metrics(ctypes.Structure):
    _strata_name_ = "strata_metrics"
    _fields_ = [("struct_size", ctypes.c_uint32)] + [
        (n, ctypes.c_int64) for n in ("requests_submitted", "requests_finished", "requests_running",
                                      "requests_waiting", "preemptions", "deadline_misses")
    ] + [(n, _Latency) for n in ("ttft", "tpot", "queue")] + [
        (n, ctypes.c_int64) for n in ("prefix_lookup_tokens", "prefix_hit_tokens", "prefill_tokens",
                                      "generated_tokens", "decode_steps", "decode_rows")
    ] + [
        (n, ctypes.c_uint64) for n in ("memory_budget_bytes", "state_resident_bytes", "state_attention_bytes",
                                       "state_recurrent_bytes", "state_swapped_bytes", "prefix_cache_bytes")
    ] + [("prefix_cache_entries", ctypes.c_int64), ("state_active_bytes", ctypes.c_uint64)]


_MetricsCallback = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Metrics), _vp)


class _EngineParams(ctypes.Structure):
    _strata_name_ = "strata_engine_params"
    _fields_ = [("struct_size", ctypes.c_uint32), ("num_threads", ctypes.c_int32),
                ("log_callback", _LogCallback), ("log_user_data", _vp), ("log_level", ctypes.c_int32),
                ("memory_budget_bytes", ctypes.c_uint64), ("max_batch", ctypes.c_int32),
                ("prefix_cache_bytes", ctypes.c_uint64), ("prefix_block_tokens", ctypes.c_int32),
                ("metrics_callback", _MetricsCallback), ("metrics_user_data", _vp),
                ("metrics_interval_ms", ctypes.c_int32), ("options", ctypes.c_char_p)]


class _ModelParams(ctypes.Structure):
    _strata_name_ = "strata_model_params"
    _fields_ = [("struct_size", ctypes.c_uint32), ("progress_callback", _ProgressCallback),
                ("progress_user_data", _vp), ("device", ctypes.c_int32), ("device_index", ctypes.c_int32),
                ("max_batch", ctypes.c_int64), ("max_sequences", ctypes.c_int64),
                ("max_context_tokens", ctypes.c_int64), ("prefill_slice_tokens", ctypes.c_int64),
                ("gpu_memory_fraction", ctypes.c_double), ("cuda_graphs", ctypes.c_bool),
                ("batch_invariant", ctypes.c_bool), ("dummy_weights", ctypes.c_bool),
                ("dummy_seed", ctypes.c_uint64), ("options", ctypes.c_char_p),
                ("check_weights", ctypes.c_bool)]


class _ModelInfo(ctypes.Structure):
    _strata_name_ = "strata_model_info"
    _fields_ = [("struct_size", ctypes.c_uint32), ("architecture", ctypes.c_char_p),
                ("num_layers", ctypes.c_int32), ("vocab_size", ctypes.c_int32),
                ("hidden_size", ctypes.c_int32), ("bos_token_id", ctypes.c_int32),
                ("eos_token_id", ctypes.c_int32), ("num_parameters", ctypes.c_int64),
                ("parameter_bytes", ctypes.c_uint64), ("max_context_tokens", ctypes.c_int64),
                ("state_bytes_per_token", ctypes.c_uint64),
                ("state_bytes_per_sequence", ctypes.c_uint64),
                ("device", ctypes.c_char_p), ("device_notice", ctypes.c_char_p),
                ("tuning", ctypes.c_char_p)]


class _SessionParams(ctypes.Structure):
    _strata_name_ = "strata_session_params"
    _fields_ = [("struct_size", ctypes.c_uint32), ("max_context_tokens", ctypes.c_int64)]


class _RequestParams(ctypes.Structure):
    _strata_name_ = "strata_request_params"
    _fields_ = [("struct_size", ctypes.c_uint32), ("max_tokens", ctypes.c_int32),
                ("stop_tokens", ctypes.POINTER(ctypes.c_int32)), ("num_stop_tokens", ctypes.c_size_t),
                ("stop_at_eos", ctypes.c_bool), ("temperature", ctypes.c_float),
                ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repetition_penalty", ctypes.c_float), ("presence_penalty", ctypes.c_float),
                ("frequency_penalty", ctypes.c_float), ("seed", ctypes.c_uint64),
                ("token_callback", _TokenCallback), ("user_data", _vp), ("priority", ctypes.c_int32),
                ("deadline_ms", ctypes.c_int64), ("max_context_tokens", ctypes.c_int64)]


class _ChatMessage(ctypes.Structure):
    _strata_name_ = "strata_chat_message"
    _fields_ = [("struct_size", ctypes.c_uint32), ("role", ctypes.c_int32), ("content", ctypes.c_char_p),
                ("content_len", ctypes.c_size_t), ("reasoning_content", ctypes.c_char_p),
                ("reasoning_content_len", ctypes.c_size_t), ("tool_call_id", ctypes.c_char_p),
                ("name", ctypes.c_char_p), ("tool_calls_json", ctypes.c_char_p)]


class _Tool(ctypes.Structure):
    _strata_name_ = "strata_tool"
    _fields_ = [("struct_size", ctypes.c_uint32), ("name", ctypes.c_char_p), ("description", ctypes.c_char_p),
                ("parameters_json", ctypes.c_char_p), ("callback", _ToolCallback), ("user_data", _vp)]


class _ChatParams(ctypes.Structure):
    _strata_name_ = "strata_chat_params"
    _fields_ = [("struct_size", ctypes.c_uint32), ("stop_strings", ctypes.POINTER(ctypes.c_char_p)),
                ("num_stop_strings", ctypes.c_size_t), ("max_tool_rounds", ctypes.c_int32),
                ("skip_special_tokens", ctypes.c_bool), ("template_variables_json", ctypes.c_char_p),
                ("event_callback", _EventCallback), ("user_data", _vp)]


# Every mirrored struct; the library refuses to load unless each matches.
STRUCTS = (_Latency, _Metrics, _EngineParams, _Event, _ModelParams, _ModelInfo, _SessionParams, _RequestParams,
           _ChatMessage, _Tool, _ChatParams)

# Input structs and the _init_sized function that fills each with defaults.
_INIT_FUNCTIONS = {
    _EngineParams: "strata_engine_params_init_sized",
    _ModelParams: "strata_model_params_init_sized",
    _SessionParams: "strata_session_params_init_sized",
    _RequestParams: "strata_request_params_init_sized",
    _ChatMessage: "strata_chat_message_init_sized",
    _Tool: "strata_tool_init_sized",
    _ChatParams: "strata_chat_params_init_sized",
}


def check_layout(lib, struct, c_name=None):
    """Raises LayoutError unless `struct` (a ctypes.Structure) has the size and field offsets of the
    library's struct `c_name` (default: struct._strata_name_). Every difference is listed.

    The library reports sizes and offsets, not field types: a field declared narrower than in C whose
    difference the next field's alignment padding absorbs keeps every offset, and is not seen here."""
    name = c_name or struct._strata_name_
    size = ctypes.c_size_t()
    if lib.strata_abi_struct_size(name.encode(), ctypes.byref(size)) != STRATA_OK:
        raise LayoutError(f"{name}: libstrata has no such struct ({_last_error(lib)})")
    problems = []
    for field, _ in struct._fields_:
        offset = ctypes.c_size_t()
        mine = getattr(struct, field).offset
        if lib.strata_abi_field_offset(name.encode(), field.encode(), ctypes.byref(offset)) != STRATA_OK:
            problems.append(f"{name}.{field}: declared by the binding at offset {mine}, unknown to libstrata")
        elif offset.value != mine:
            problems.append(f"{name}.{field}: offset {mine} in the binding, {offset.value} in libstrata")
    if ctypes.sizeof(struct) != size.value:
        last = struct._fields_[-1][0] if struct._fields_ else "(none)"
        problems.append(f"{name}: {ctypes.sizeof(struct)} bytes in the binding, {size.value} in libstrata "
                        f"(a field is missing or extra; the binding's last field is '{last}')")
    if problems:
        raise LayoutError("the Python binding does not match libstrata: " + "; ".join(problems))


def check_layouts(lib, structs=None):
    """check_layout for each of `structs` (default: every struct this module mirrors)."""
    for struct in STRUCTS if structs is None else structs:
        check_layout(lib, struct)


def _last_error(lib):
    return lib.strata_last_error_message().decode("utf-8", "replace")


def _load_library(path=None):
    path = path or os.environ.get("STRATA_LIBRARY", "libstrata.so.1")
    lib = ctypes.CDLL(path)
    st, sz, i32, cp = ctypes.c_int32, ctypes.c_size_t, ctypes.c_int32, ctypes.c_char_p
    P = ctypes.POINTER
    sigs = {
        "strata_version_string": ([], cp),
        "strata_abi_version": ([], ctypes.c_uint32),
        "strata_last_error_message": ([], cp),
        "strata_status_string": ([st], cp),
        "strata_abi_struct_size": ([cp, P(sz)], st),
        "strata_abi_field_offset": ([cp, cp, P(sz)], st),
        "strata_engine_params_init_sized": ([P(_EngineParams), sz], st),
        "strata_engine_create": ([P(_EngineParams), P(_vp)], st),
        "strata_engine_destroy": ([_vp], st),
        "strata_engine_get_metrics": ([_vp, P(_Metrics)], st),
        "strata_engine_get_stat": ([_vp, cp, P(ctypes.c_double)], st),
        "strata_engine_list_stats": ([_vp, sz, P(cp)], st),
        "strata_model_params_init_sized": ([P(_ModelParams), sz], st),
        "strata_model_load": ([_vp, cp, P(_ModelParams), P(_vp)], st),
        "strata_model_get_info": ([_vp, P(_ModelInfo)], st),
        "strata_model_destroy": ([_vp], st),
        "strata_model_open_tokenizer": ([_vp, P(_vp)], st),
        "strata_session_params_init_sized": ([P(_SessionParams), sz], st),
        "strata_session_create": ([_vp, P(_SessionParams), P(_vp)], st),
        "strata_session_destroy": ([_vp], st),
        "strata_session_append_tokens": ([_vp, P(i32), sz], st),
        "strata_session_get_logits": ([_vp, P(ctypes.c_float), sz, P(sz)], st),
        "strata_session_get_num_tokens": ([_vp, P(sz)], st),
        "strata_session_reset": ([_vp], st),
        "strata_request_params_init_sized": ([P(_RequestParams), sz], st),
        "strata_session_generate": ([_vp, P(i32), sz, P(_RequestParams), P(i32)], st),
        "strata_request_cancel": ([_vp], st),
        "strata_request_submit_tool_result": ([_vp, cp, cp, sz], st),
        "strata_tokenizer_open": ([cp, P(_vp)], st),
        "strata_tokenizer_destroy": ([_vp], st),
        "strata_tokenizer_encode": ([_vp, cp, sz, ctypes.c_bool, P(i32), sz, P(sz)], st),
        "strata_tokenizer_decode": ([_vp, P(i32), sz, ctypes.c_bool, cp, sz, P(sz)], st),
        "strata_chat_message_init_sized": ([P(_ChatMessage), sz], st),
        "strata_session_add_message": ([_vp, P(_ChatMessage)], st),
        "strata_session_get_conversation": ([_vp, cp, sz, P(sz)], st),
        "strata_tool_init_sized": ([P(_Tool), sz], st),
        "strata_session_add_tool": ([_vp, P(_Tool)], st),
        "strata_session_clear_tools": ([_vp], st),
        "strata_chat_params_init_sized": ([P(_ChatParams), sz], st),
        "strata_session_chat": ([_vp, P(_RequestParams), P(_ChatParams), P(i32)], st),
        "strata_session_save": ([_vp, cp], st),
        "strata_session_save_to_buffer": ([_vp, _vp, sz, P(sz)], st),
        "strata_session_load": ([_vp, cp, P(_SessionParams), P(_vp)], st),
        "strata_session_load_from_buffer": ([_vp, _vp, sz, P(_SessionParams), P(_vp)], st),
    }
    for name, (args, res) in sigs.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LayoutError(f"{path} does not export {name}: it is not a libstrata of this binding's ABI")
        fn.argtypes, fn.restype = args, res
    if lib.strata_abi_version() != ABI_VERSION:
        raise LayoutError(f"{path} has ABI {lib.strata_abi_version()}; this binding mirrors ABI {ABI_VERSION}")
    check_layouts(lib)
    return lib


_lib = None


def library(path=None):
    """Loads libstrata once (from `path`, $STRATA_LIBRARY, or the loader's search path) and checks that every
    struct of this module matches it (LayoutError otherwise)."""
    global _lib
    if _lib is None:
        _lib = _load_library(path)
    return _lib


def _check(status):
    if status != STRATA_OK:
        raise StrataError(status, _last_error(library()))


def _init(struct):
    """A struct filled with the library's defaults. The size passed is this module's own sizeof, so the
    library never writes past the Python object."""
    value = struct()
    _check(getattr(library(), _INIT_FUNCTIONS[struct])(ctypes.byref(value), ctypes.sizeof(value)))
    return value


def _ids(tokens):
    arr = (ctypes.c_int32 * len(tokens))(*tokens)
    return arr, len(tokens)


def _fill(params, values, what):
    for key, value in values.items():
        if value is None:
            continue
        if key not in dict(type(params)._fields_):
            raise TypeError(f"{what}: unknown option '{key}'")
        setattr(params, key, value)


def _text(data):
    if data is None:
        return None
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)


class _CallbackError:
    """Carries the first exception a Python callback raised across the C call that ran the callback.

    ctypes cannot let an exception unwind through C frames: it would print it and return 0, and the C side
    would go on. So each trampoline catches everything (KeyboardInterrupt too), records it here and answers
    "stop"; once one has raised, every later callback of the same call answers "stop" without running Python
    code; and the calling method raises the exception once the C call has returned."""

    def __init__(self):
        self.error = None

    def trampoline(self, fn, stop, on_error=None):
        def call(*args):
            if self.error is not None:
                if on_error is not None:
                    on_error(*args)
                return stop
            try:
                return fn(*args)
            except BaseException as e:  # noqa: B902 - every exception must reach the caller, not ctypes
                self.error = e
                if on_error is not None:
                    on_error(*args)
                return stop
        return call

    def raise_pending(self, what, status):
        """Raises the recorded exception (its own traceback kept) and forgets it."""
        error, self.error = self.error, None
        if error is None:
            return
        if hasattr(error, "add_note"):
            lib = library()
            outcome = lib.strata_status_string(status).decode()
            if status != STRATA_OK:
                outcome += f": {_last_error(lib)}"
            error.add_note(f"raised in a Python callback of {what}, which stopped there and returned {outcome}")
        try:
            raise error
        finally:
            error = None  # the traceback's frames would otherwise hold this frame, and it them


class Engine:
    """An engine: compute threads and the scheduler. `options` is the scheduler's `key=value,...` string."""

    def __init__(self, num_threads=None, memory_budget_bytes=None, max_batch=None, prefix_cache_bytes=None,
                 prefix_block_tokens=None, options=None):
        params = _init(_EngineParams)
        _fill(params, dict(num_threads=num_threads, memory_budget_bytes=memory_budget_bytes, max_batch=max_batch,
                           prefix_cache_bytes=prefix_cache_bytes, prefix_block_tokens=prefix_block_tokens,
                           options=_text(options)), "Engine")
        self._h = ctypes.c_void_p()
        _check(library().strata_engine_create(ctypes.byref(params), ctypes.byref(self._h)))

    def close(self):
        if self._h:
            _check(library().strata_engine_destroy(self._h))
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def load_model(self, model_dir, **kwargs):
        """Loads a model directory; see Model for the keyword arguments."""
        return Model(self, model_dir, **kwargs)

    def metrics(self):
        m = _Metrics()
        m.struct_size = ctypes.sizeof(m)
        _check(library().strata_engine_get_metrics(self._h, ctypes.byref(m)))
        out = {}
        for name, kind in _Metrics._fields_:
            if name == "struct_size":
                continue
            value = getattr(m, name)
            out[name] = ({f: getattr(value, f) for f, _ in _Latency._fields_} if kind is _Latency else value)
        return out

    def stat(self, name):
        """One named statistic (strata_engine_get_stat), e.g. "scheduler.iterations"."""
        value = ctypes.c_double()
        _check(library().strata_engine_get_stat(self._h, name.encode(), ctypes.byref(value)))
        return value.value

    def stats(self):
        """Every named statistic, as {name: value}."""
        out, index = {}, 0
        while True:
            name = ctypes.c_char_p()
            status = library().strata_engine_list_stats(self._h, index, ctypes.byref(name))
            if status == STRATA_ERR_OUT_OF_RANGE:
                return out
            _check(status)
            out[name.value.decode()] = self.stat(name.value.decode())
            index += 1


class Model:
    """A loaded model.

    device: "auto" (the GPU when usable, else the CPU; info()["device_notice"] says why), "cpu", or "cuda"
    (strict: StrataError STRATA_ERR_UNAVAILABLE instead of a fallback). device_index picks the GPU.
    max_batch, max_sequences, max_context_tokens, prefill_slice_tokens, gpu_memory_fraction, cuda_graphs and
    batch_invariant size the GPU plan; dummy_weights/dummy_seed fill random weights (benchmarks); options is
    the kernel `key=value,...` string; check_weights scans every weight at load and fails (StrataError
    STRATA_ERR_DATA_LOSS, naming the tensor) on a NaN or an infinity. None keeps the library's default.
    on_progress(fraction) is called as loading advances; a true return value cancels the load
    (StrataError STRATA_ERR_CANCELLED), an exception is raised again from here.
    """

    def __init__(self, engine, model_dir, device="auto", device_index=None, max_batch=None, max_sequences=None,
                 max_context_tokens=None, prefill_slice_tokens=None, gpu_memory_fraction=None, cuda_graphs=None,
                 batch_invariant=None, dummy_weights=None, dummy_seed=None, options=None, on_progress=None,
                 check_weights=None):
        if device not in DEVICES:
            raise ValueError(f"device must be one of {sorted(DEVICES)}, got {device!r}")
        params = _init(_ModelParams)
        _fill(params, dict(device=DEVICES[device], device_index=device_index, max_batch=max_batch,
                           max_sequences=max_sequences, max_context_tokens=max_context_tokens,
                           prefill_slice_tokens=prefill_slice_tokens, gpu_memory_fraction=gpu_memory_fraction,
                           cuda_graphs=cuda_graphs, batch_invariant=batch_invariant, dummy_weights=dummy_weights,
                           dummy_seed=dummy_seed, options=_text(options), check_weights=check_weights),
              "load_model")
        errors = _CallbackError()
        if on_progress is not None:
            params.progress_callback = _ProgressCallback(
                errors.trampoline(lambda fraction, _ud: 1 if on_progress(fraction) else 0, 1))
        self._engine = engine  # the engine must outlive its models
        self._h = ctypes.c_void_p()
        status = library().strata_model_load(engine._h, os.fsencode(model_dir), ctypes.byref(params),
                                             ctypes.byref(self._h))
        errors.raise_pending("strata_model_load", status)
        _check(status)

    def info(self):
        info = _ModelInfo()
        info.struct_size = ctypes.sizeof(_ModelInfo)
        _check(library().strata_model_get_info(self._h, ctypes.byref(info)))
        out = {name: getattr(info, name) for name, _ in _ModelInfo._fields_ if name != "struct_size"}
        for name in ("architecture", "device", "device_notice", "tuning"):
            out[name] = out[name].decode("utf-8", "replace")
        return out

    def close(self):
        if self._h:
            _check(library().strata_model_destroy(self._h))
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def session(self, max_context_tokens=None):
        return Session(self, max_context_tokens)

    def tokenizer(self):
        """The tokenizer of the model's directory (StrataError when it has none)."""
        return Tokenizer(model=self)


class Tokenizer:
    """Text <-> token ids with a directory's tokenizer files (no weights needed)."""

    def __init__(self, model_dir=None, model=None):
        self._h = ctypes.c_void_p()
        if model is not None:
            _check(library().strata_model_open_tokenizer(model._h, ctypes.byref(self._h)))
        else:
            _check(library().strata_tokenizer_open(os.fsencode(model_dir), ctypes.byref(self._h)))

    def encode(self, text, add_special_tokens=True):
        data = text.encode("utf-8")
        count = ctypes.c_size_t()
        _check(library().strata_tokenizer_encode(self._h, data, len(data), add_special_tokens, None, 0,
                                                 ctypes.byref(count)))
        buf = (ctypes.c_int32 * max(count.value, 1))()
        _check(library().strata_tokenizer_encode(self._h, data, len(data), add_special_tokens, buf, count.value,
                                                 ctypes.byref(count)))
        return list(buf[: count.value])

    def decode(self, tokens, skip_special_tokens=False):
        arr, n = _ids(tokens)
        length = ctypes.c_size_t()
        _check(library().strata_tokenizer_decode(self._h, arr, n, skip_special_tokens, None, 0,
                                                 ctypes.byref(length)))
        buf = ctypes.create_string_buffer(length.value + 1)
        _check(library().strata_tokenizer_decode(self._h, arr, n, skip_special_tokens, buf, length.value + 1,
                                                 ctypes.byref(length)))
        return buf.raw[: length.value].decode("utf-8", "replace")

    def close(self):
        if self._h:
            _check(library().strata_tokenizer_destroy(self._h))
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Event:
    """A chat event, copied out of the library's (whose strings live only during the callback)."""

    __slots__ = ("type", "text", "tool_call_id", "tool_name", "tool_arguments", "num_generated_tokens")

    def __init__(self, c):
        self.type = c.type
        self.num_generated_tokens = c.num_generated_tokens
        self.text = ctypes.string_at(c.text, c.text_len).decode("utf-8", "replace") if c.text else None
        self.tool_call_id = c.tool_call_id.decode("utf-8", "replace") if c.tool_call_id else None
        self.tool_name = c.tool_name.decode("utf-8", "replace") if c.tool_name else None
        self.tool_arguments = (ctypes.string_at(c.tool_arguments, c.tool_arguments_len).decode("utf-8", "replace")
                               if c.tool_arguments else None)

    def __repr__(self):
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__ if getattr(self, k) is not None)
        return f"Event({fields})"


def _request_params(options, what):
    params = _init(_RequestParams)
    stop_tokens = options.pop("stop_tokens", None)
    for reserved in ("struct_size", "token_callback", "user_data", "num_stop_tokens"):
        if reserved in options:
            raise TypeError(f"{what}: unknown option '{reserved}'")
    _fill(params, options, what)
    if stop_tokens:
        arr, n = _ids(list(stop_tokens))
        params.stop_tokens, params.num_stop_tokens = arr, n  # the struct keeps `arr` alive
    return params


def _cancel_request(request, *_):
    # A tool's nonzero return only answers the call with an error and the conversation goes on; a Python
    # exception must end the request instead.
    library().strata_request_cancel(request)


class Session:
    """A conversation on a model. Generation and chat run on the calling thread; one thread at a time."""

    def __init__(self, model, max_context_tokens=None, _make=None):
        params = _init(_SessionParams)
        _fill(params, dict(max_context_tokens=max_context_tokens), "session")
        self._model = model  # the model must outlive its sessions
        self._vocab = model.info()["vocab_size"]
        # Tool trampolines must live as long as the library may call them: until clear_tools or close.
        self._tools = []
        self._errors = _CallbackError()
        self._h = ctypes.c_void_p()
        make = _make or (lambda p, out: library().strata_session_create(model._h, p, out))
        _check(make(ctypes.byref(params), ctypes.byref(self._h)))

    def save(self, path):
        """Saves the session to the file `path` (strata_session_save): history, logits, state, marks,
        conversation and tool definitions; tool callbacks are not saved."""
        _check(library().strata_session_save(self._h, _text(os.fspath(path))))

    def to_bytes(self):
        """The session in the saved-session format, as bytes (strata_session_save_to_buffer)."""
        size = ctypes.c_size_t()
        _check(library().strata_session_save_to_buffer(self._h, None, 0, ctypes.byref(size)))
        buf = ctypes.create_string_buffer(size.value)
        _check(library().strata_session_save_to_buffer(self._h, buf, size.value, ctypes.byref(size)))
        return buf.raw[: size.value]

    @classmethod
    def load(cls, model, path, max_context_tokens=None):
        """A session from a file `save` wrote (strata_session_load); its tools come back without callbacks:
        add_tool with the same definition attaches one."""
        name = _text(os.fspath(path))
        return cls(model, max_context_tokens,
                   _make=lambda p, out: library().strata_session_load(model._h, name, p, out))

    @classmethod
    def from_bytes(cls, model, data, max_context_tokens=None):
        """A session from bytes `to_bytes` gave (strata_session_load_from_buffer)."""
        data = bytes(data)
        buf = ctypes.create_string_buffer(data, len(data))
        return cls(model, max_context_tokens,
                   _make=lambda p, out: library().strata_session_load_from_buffer(model._h, buf, len(data), p,
                                                                                   out))

    def append(self, tokens):
        arr, n = _ids(tokens)
        _check(library().strata_session_append_tokens(self._h, arr, n))

    def logits(self):
        buf = (ctypes.c_float * self._vocab)()
        count = ctypes.c_size_t()
        _check(library().strata_session_get_logits(self._h, buf, self._vocab, ctypes.byref(count)))
        return list(buf[: count.value])

    def num_tokens(self):
        n = ctypes.c_size_t()
        _check(library().strata_session_get_num_tokens(self._h, ctypes.byref(n)))
        return n.value

    def reset(self):
        _check(library().strata_session_reset(self._h))

    def generate(self, prompt, max_tokens=16, temperature=0.0, top_k=0, top_p=1.0, seed=0, on_token=None,
                 **options):
        """Generates after `prompt`; returns (tokens, finish_reason).

        `on_token(id)` streams; a true return value stops (FINISH_CALLBACK) and an exception stops the
        generation and is raised again from here. `options` are further strata_request_params fields
        (stop_tokens, stop_at_eos, min_p, repetition_penalty, ..., priority, deadline_ms, max_context_tokens).
        """
        options.update(max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        params = _request_params(options, "generate")
        out = []

        def on_c_token(_req, token, _ud):
            out.append(token)
            return 1 if on_token is not None and on_token(token) else 0

        params.token_callback = _TokenCallback(self._errors.trampoline(on_c_token, 1))
        arr, n = _ids(prompt)
        reason = ctypes.c_int32()
        status = library().strata_session_generate(self._h, arr, n, ctypes.byref(params), ctypes.byref(reason))
        self._errors.raise_pending("strata_session_generate", status)
        _check(status)
        return out, reason.value

    def add_message(self, role, content=None, reasoning_content=None, tool_call_id=None, name=None,
                    tool_calls=None):
        """Appends a message; `role` is "system", "user", "assistant" or "tool"; `tool_calls` a list in the
        OpenAI form (or its JSON text)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {sorted(ROLES)}, got {role!r}")
        m = _init(_ChatMessage)
        m.role = ROLES[role]
        if content is not None:
            m.content = _text(content)
            m.content_len = len(m.content)
        if reasoning_content is not None:
            m.reasoning_content = _text(reasoning_content)
            m.reasoning_content_len = len(m.reasoning_content)
        m.tool_call_id, m.name = _text(tool_call_id), _text(name)
        if tool_calls is not None:
            m.tool_calls_json = _text(tool_calls if isinstance(tool_calls, str) else json.dumps(tool_calls))
        _check(library().strata_session_add_message(self._h, ctypes.byref(m)))

    def conversation(self):
        """The conversation as a list of messages (the chat-template form)."""
        length = ctypes.c_size_t()
        _check(library().strata_session_get_conversation(self._h, None, 0, ctypes.byref(length)))
        buf = ctypes.create_string_buffer(length.value + 1)
        _check(library().strata_session_get_conversation(self._h, buf, length.value + 1, ctypes.byref(length)))
        return json.loads(buf.raw[: length.value].decode("utf-8"))

    def add_tool(self, name, description=None, parameters=None, callback=None):
        """Registers a tool. `parameters` is its JSON schema (dict or JSON text).

        chat() calls `callback(arguments)` with the call's arguments as a dict; a str result is sent as is,
        anything else as JSON. An exception ends the request (it is cancelled) and is raised again from
        chat(). Without a callback, chat() declines the tool's calls (FINISH_TOOL_CALLS)."""
        tool = _init(_Tool)
        tool.name, tool.description = _text(name), _text(description)
        if parameters is not None:
            tool.parameters_json = _text(parameters if isinstance(parameters, str) else json.dumps(parameters))
        trampoline = None
        if callback is not None:
            def on_call(request, event_ptr, _ud):
                event = event_ptr.contents
                arguments = json.loads(ctypes.string_at(event.tool_arguments, event.tool_arguments_len))
                result = callback(arguments)
                data = _text(result if isinstance(result, str) else json.dumps(result))
                _check(library().strata_request_submit_tool_result(request, event.tool_call_id, data, len(data)))
                return 0

            trampoline = _ToolCallback(self._errors.trampoline(on_call, 1, _cancel_request))
            tool.callback = trampoline
        _check(library().strata_session_add_tool(self._h, ctypes.byref(tool)))
        if trampoline is not None:
            self._tools.append(trampoline)

    def clear_tools(self):
        _check(library().strata_session_clear_tools(self._h))
        self._tools = []

    def chat(self, max_tokens=128, on_event=None, stop_strings=None, max_tool_rounds=None,
             skip_special_tokens=None, template_variables=None, **options):
        """Runs an assistant turn on the conversation, calling the tools' callbacks; returns
        (text, finish_reason), the text being the TEXT events joined.

        `on_event(event)` receives each TEXT, TOOL_CALL and TOOL_ERROR Event; a true return value stops
        (FINISH_CALLBACK), an exception stops the turn and is raised again from here. `options` are
        strata_request_params fields as in generate()."""
        options.update(max_tokens=max_tokens)
        params = _request_params(options, "chat")
        chat = _init(_ChatParams)
        _fill(chat, dict(max_tool_rounds=max_tool_rounds, skip_special_tokens=skip_special_tokens), "chat")
        if template_variables is not None:
            chat.template_variables_json = _text(template_variables if isinstance(template_variables, str)
                                                 else json.dumps(template_variables))
        if stop_strings:
            strings = (ctypes.c_char_p * len(stop_strings))(*[_text(s) for s in stop_strings])
            chat.stop_strings, chat.num_stop_strings = strings, len(stop_strings)
        text = []

        def on_c_event(_req, event_ptr, _ud):
            event = Event(event_ptr.contents)
            if event.type == EVENT_TEXT:
                text.append(event.text)
            return 1 if on_event is not None and on_event(event) else 0

        chat.event_callback = _EventCallback(self._errors.trampoline(on_c_event, 1))
        reason = ctypes.c_int32()
        status = library().strata_session_chat(self._h, ctypes.byref(params), ctypes.byref(chat),
                                               ctypes.byref(reason))
        self._errors.raise_pending("strata_session_chat", status)
        _check(status)
        return "".join(text), reason.value

    def close(self):
        if self._h:
            _check(library().strata_session_destroy(self._h))
            self._h = ctypes.c_void_p()
            self._tools = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
