"""Python binding for Strata over its C ABI (ctypes, no compiler needed).

Only the stable C ABI of libstrata is used, so this module works with any
libstrata of the same ABI major. Errors raise StrataError carrying the status
code and the library's message (which names the file, field or tensor).
"""
import ctypes
import os

_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p)

STRATA_OK = 0


class StrataError(RuntimeError):
    def __init__(self, status, message):
        super().__init__(f"strata error {status}: {message}")
        self.status = status
        self.message = message


class _ModelInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("architecture", ctypes.c_char_p),
                ("num_layers", ctypes.c_int32), ("vocab_size", ctypes.c_int32),
                ("hidden_size", ctypes.c_int32), ("bos_token_id", ctypes.c_int32),
                ("eos_token_id", ctypes.c_int32), ("num_parameters", ctypes.c_int64),
                ("parameter_bytes", ctypes.c_uint64), ("max_context_tokens", ctypes.c_int64),
                ("state_bytes_per_token", ctypes.c_uint64),
                ("state_bytes_per_sequence", ctypes.c_uint64)]


class _RequestParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("max_tokens", ctypes.c_int32),
                ("stop_tokens", ctypes.POINTER(ctypes.c_int32)), ("num_stop_tokens", ctypes.c_size_t),
                ("stop_at_eos", ctypes.c_bool), ("temperature", ctypes.c_float),
                ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repetition_penalty", ctypes.c_float), ("presence_penalty", ctypes.c_float),
                ("frequency_penalty", ctypes.c_float), ("seed", ctypes.c_uint64),
                ("token_callback", _CB), ("user_data", ctypes.c_void_p)]


def _load_library(path=None):
    path = path or os.environ.get("STRATA_LIBRARY", "libstrata.so.1")
    lib = ctypes.CDLL(path)
    vp, st = ctypes.c_void_p, ctypes.c_int32
    sigs = {
        "strata_version_string": ([], ctypes.c_char_p),
        "strata_abi_version": ([], ctypes.c_uint32),
        "strata_last_error_message": ([], ctypes.c_char_p),
        "strata_engine_create": ([vp, ctypes.POINTER(vp)], st),
        "strata_engine_destroy": ([vp], st),
        "strata_model_load": ([vp, ctypes.c_char_p, vp, ctypes.POINTER(vp)], st),
        "strata_model_get_info": ([vp, ctypes.POINTER(_ModelInfo)], st),
        "strata_model_destroy": ([vp], st),
        "strata_session_create": ([vp, vp, ctypes.POINTER(vp)], st),
        "strata_session_destroy": ([vp], st),
        "strata_session_append_tokens": ([vp, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t], st),
        "strata_session_get_logits": ([vp, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t,
                                       ctypes.POINTER(ctypes.c_size_t)], st),
        "strata_request_params_init": ([ctypes.POINTER(_RequestParams)], None),
        "strata_session_generate": ([vp, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                     ctypes.POINTER(_RequestParams), ctypes.POINTER(ctypes.c_int32)], st),
        "strata_tokenizer_open": ([ctypes.c_char_p, ctypes.POINTER(vp)], st),
        "strata_model_open_tokenizer": ([vp, ctypes.POINTER(vp)], st),
        "strata_tokenizer_destroy": ([vp], st),
        "strata_tokenizer_encode": ([vp, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_bool,
                                     ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                     ctypes.POINTER(ctypes.c_size_t)], st),
        "strata_tokenizer_decode": ([vp, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.c_bool,
                                     ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)], st),
    }
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    return lib


_lib = None


def library(path=None):
    """Loads libstrata once (from `path`, $STRATA_LIBRARY, or the loader's search path)."""
    global _lib
    if _lib is None:
        _lib = _load_library(path)
    return _lib


def _check(status):
    if status != STRATA_OK:
        raise StrataError(status, library().strata_last_error_message().decode("utf-8", "replace"))


def _ids(tokens):
    arr = (ctypes.c_int32 * len(tokens))(*tokens)
    return arr, len(tokens)


class Engine:
    def __init__(self):
        self._h = ctypes.c_void_p()
        _check(library().strata_engine_create(None, ctypes.byref(self._h)))

    def close(self):
        if self._h:
            _check(library().strata_engine_destroy(self._h))
            self._h = ctypes.c_void_p()

    def load_model(self, model_dir):
        return Model(self, model_dir)


class Model:
    def __init__(self, engine, model_dir):
        self._h = ctypes.c_void_p()
        _check(library().strata_model_load(engine._h, os.fsencode(model_dir), None, ctypes.byref(self._h)))

    def info(self):
        info = _ModelInfo()
        info.struct_size = ctypes.sizeof(_ModelInfo)
        _check(library().strata_model_get_info(self._h, ctypes.byref(info)))
        out = {name: getattr(info, name) for name, _ in _ModelInfo._fields_ if name != "struct_size"}
        out["architecture"] = out["architecture"].decode()
        return out

    def close(self):
        if self._h:
            _check(library().strata_model_destroy(self._h))
            self._h = ctypes.c_void_p()

    def session(self):
        return Session(self)

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


class Session:
    def __init__(self, model):
        self._h = ctypes.c_void_p()
        self._vocab = model.info()["vocab_size"]
        _check(library().strata_session_create(model._h, None, ctypes.byref(self._h)))

    def append(self, tokens):
        arr, n = _ids(tokens)
        _check(library().strata_session_append_tokens(self._h, arr, n))

    def logits(self):
        buf = (ctypes.c_float * self._vocab)()
        count = ctypes.c_size_t()
        _check(library().strata_session_get_logits(self._h, buf, self._vocab, ctypes.byref(count)))
        return list(buf[: count.value])

    def generate(self, prompt, max_tokens=16, temperature=0.0, top_k=0, top_p=1.0, seed=0, on_token=None):
        """Generates after `prompt`; returns (tokens, finish_reason). `on_token(id)` streams."""
        params = _RequestParams()
        library().strata_request_params_init(ctypes.byref(params))
        params.max_tokens, params.temperature = max_tokens, temperature
        params.top_k, params.top_p, params.seed = top_k, top_p, seed
        out = []

        def cb(_req, token, _ud):
            out.append(token)
            if on_token is not None:
                on_token(token)
            return 0

        params.token_callback = _CB(cb)
        arr, n = _ids(prompt)
        reason = ctypes.c_int32()
        _check(library().strata_session_generate(self._h, arr, n, ctypes.byref(params), ctypes.byref(reason)))
        return out, reason.value

    def close(self):
        if self._h:
            _check(library().strata_session_destroy(self._h))
            self._h = ctypes.c_void_p()
