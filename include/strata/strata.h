/**
 * @file strata.h
 * @brief The Strata C ABI: the one stable interface of libstrata.
 *
 * Strata runs hybrid-attention language models inside the host process. This
 * header is the whole public contract: anything not declared here (or in
 * strata_version.h, which it includes) is private and may change at any time.
 * The header is plain C99 and includes only <stddef.h>, <stdint.h> and
 * <stdbool.h>.
 *
 * @par Conventions
 * 1. **Handles.** strata_engine, strata_model, strata_session and
 *    strata_request are opaque. Each is made by a `_create`/`_load`/`_submit`
 *    call and released by exactly one `_destroy` call. Passing NULL where a
 *    handle is required returns ::STRATA_ERR_INVALID_ARGUMENT. Passing a handle
 *    that was already destroyed, or a handle of the wrong type, returns
 *    ::STRATA_ERR_MISUSE: destroyed handles stay detectable for the last few
 *    thousand destroys of each type (best effort; beyond that the memory is
 *    freed and using it is undefined behaviour).
 * 2. **Errors are values.** Every function that can fail returns a
 *    ::strata_status and writes results through `out_` pointers. On failure
 *    `out_` handles are set to NULL and strata_last_error_message() explains the
 *    failure in English. No exception, abort or exit ever leaves the library.
 * 3. **Parameter structs** begin with `uint32_t struct_size`. Fill input
 *    structs with their `_init()` function and then change fields. The library
 *    reads at most `struct_size` bytes, so a program built against an older
 *    header keeps working; a `struct_size` smaller than the 0.1 layout, or larger
 *    than this library knows with a non-zero unknown tail, is
 *    ::STRATA_ERR_INVALID_ARGUMENT. Output structs (strata_model_info,
 *    strata_event) are sized by the caller: set `struct_size = sizeof(x)` and the
 *    library writes at most that many bytes.
 * 4. **Types.** Fixed-width integers; enumerations are `int32_t` typedefs with
 *    named constants; booleans are C99 `bool`; token ids are `int32_t`; counts
 *    are `size_t`. Strings are NUL-terminated UTF-8.
 * 5. **Memory.** The library never hands the caller memory to free. Strings it
 *    returns are borrowed; each function says how long they stay valid. Arrays
 *    the caller passes in are copied before the call returns.
 * 6. **Threads.** A strata_engine is thread-safe. A strata_session is used by
 *    one thread at a time. strata_request_cancel() may be called from any
 *    thread. Each callback documents the thread it runs on. Callbacks must not
 *    destroy the object that is calling them.
 * 7. **Two layers.** The non-blocking core is strata_session_submit() plus
 *    strata_engine_poll_event(); the blocking convenience
 *    strata_session_generate() is a loop over that core (like curl's multi and
 *    easy interfaces).
 *
 * @par Lifecycle
 * 1. strata_engine_create()
 * 2. strata_model_load() (one or more models)
 * 3. strata_session_create() on a model (one per conversation)
 * 4. strata_session_append_tokens() / strata_session_get_logits() for scoring,
 *    or strata_session_generate() / strata_session_submit() for generation
 * 5. destroy in reverse order: requests, sessions, models, engine.
 *
 * @par Not offered (yet)
 * Text in or out (tokenizer, chat template), images, tool calls, batched
 * scoring of many positions, saving or forking session state, and GPU device
 * selection. Those arrive as new functions; nothing here will change meaning.
 */
#ifndef STRATA_STRATA_H_
#define STRATA_STRATA_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/strata_version.h"

/**
 * @def STRATA_API
 * @brief Marks a declaration as part of the exported ABI.
 *
 * Expands to the default-visibility attribute on ELF and Mach-O platforms, and
 * to dllexport/dllimport on Windows. libstrata is built with hidden visibility,
 * so only declarations marked STRATA_API are exported.
 */
#if defined(_WIN32)
#if defined(STRATA_BUILDING_LIBRARY)
#define STRATA_API __declspec(dllexport)
#else
#define STRATA_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define STRATA_API __attribute__((visibility("default")))
#else
#define STRATA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------- */
/**
 * @defgroup errors Status codes and error messages
 * @brief Every call's outcome, as a value.
 *
 * Codes are append-only and never renumbered. Error codes are small positive
 * integers; bits 8 and up are reserved for detail codes (compare
 * `code & 0xff` with the primary codes to classify). Codes of 100 and above are
 * informational, not errors.
 * @{
 */

/** @brief Result of a call: ::STRATA_OK, a `STRATA_ERR_*` code, or ::STRATA_AGAIN. */
typedef int32_t strata_status;

/** Success. */
#define STRATA_OK 0
/** Bad input regardless of state: NULL pointer, bad struct_size, value out of its documented range. */
#define STRATA_ERR_INVALID_ARGUMENT 1
/** A named thing is missing, e.g. the model directory or a file in it. */
#define STRATA_ERR_NOT_FOUND 2
/** The thing to create already exists. */
#define STRATA_ERR_ALREADY_EXISTS 3
/** A valid value that does not fit this object: a token id outside the vocabulary, a prompt longer than the context, a buffer too small. */
#define STRATA_ERR_OUT_OF_RANGE 4
/** The object is in the wrong state for the call (e.g. the session has an unfinished request); do not retry until the state changes. */
#define STRATA_ERR_FAILED_PRECONDITION 5
/** Out of a budgeted resource (memory pool, queue); may succeed later. */
#define STRATA_ERR_RESOURCE_EXHAUSTED 6
/** A transient or device problem; the engine may be unusable. */
#define STRATA_ERR_UNAVAILABLE 7
/** Cancelled by the caller (strata_request_cancel(), a progress callback returning false). */
#define STRATA_ERR_CANCELLED 8
/** A deadline passed. */
#define STRATA_ERR_DEADLINE_EXCEEDED 9
/** Valid but not supported by this build or model (unknown architecture, dtype). */
#define STRATA_ERR_UNSUPPORTED 10
/** Stored data is corrupt or truncated (bad weights file, malformed config). */
#define STRATA_ERR_DATA_LOSS 11
/** A host memory allocation failed. */
#define STRATA_ERR_OUT_OF_MEMORY 12
/** The API was used incorrectly: a destroyed handle, a handle of the wrong type, a call from inside a callback that forbids it. */
#define STRATA_ERR_MISUSE 13
/** An internal invariant broke: a bug in Strata. */
#define STRATA_ERR_INTERNAL 14
/** The operating system refused access (e.g. file permissions). */
#define STRATA_ERR_PERMISSION_DENIED 15
/** Informational, not an error: nothing is ready yet (strata_engine_poll_event() timed out). */
#define STRATA_AGAIN 100

/**
 * @brief Static English text for a status code.
 * @param[in] status any value, known or not
 * @return a NUL-terminated string with static storage duration; never NULL.
 *         Unknown codes give "unknown status code".
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API const char *strata_status_string(strata_status status);

/**
 * @brief The message of the last call on this thread that returned a status.
 *
 * Every function that returns ::strata_status sets this thread's message: to a
 * sentence naming what failed (the path, the field, the value) when it returns
 * an error, and to "" when it returns ::STRATA_OK or ::STRATA_AGAIN.
 *
 * @return a NUL-terminated string owned by the library, valid on this thread
 *         until its next call into the library; never NULL.
 * @par Thread safety: the message is thread-local.
 * @since 0.1
 */
STRATA_API const char *strata_last_error_message(void);

/** @} */

/* ------------------------------------------------------------------------- */
/**
 * @defgroup version Version
 * @brief Run-time versions, to compare with the compile-time macros of strata_version.h.
 *
 * A program should check at start-up that
 * `strata_abi_version() == STRATA_ABI_VERSION` and
 * `strata_version_number() >= STRATA_VERSION_NUMBER`.
 * @{
 */

/**
 * @brief The library's version as "MAJOR.MINOR.PATCH".
 * @return a static string; never NULL.
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API const char *strata_version_string(void);

/**
 * @brief The library's version as 0xMMmmpp (same encoding as ::STRATA_VERSION_NUMBER).
 * @return the version number.
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API uint32_t strata_version_number(void);

/**
 * @brief The library's ABI number (the SONAME's major; see ::STRATA_ABI_VERSION).
 * @return the ABI number; a program built against a different number must not use this library.
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API uint32_t strata_abi_version(void);

/** @} */

/* ------------------------------------------------------------------------- */
/**
 * @defgroup strata_engine Engine
 * @brief The root object: worker threads, the request queue and the event queue.
 *
 * An engine owns a pool of compute threads and one scheduler thread that runs
 * every submitted request, round-robin, one token at a time. It is thread-safe.
 * @{
 */

/** @brief An engine (opaque). Created by strata_engine_create(), released by strata_engine_destroy(). */
typedef struct strata_engine strata_engine;
/** @brief A loaded model (opaque). Created by strata_model_load(), released by strata_model_destroy(). */
typedef struct strata_model strata_model;
/** @brief A conversation on a model: token history and its state (opaque). */
typedef struct strata_session strata_session;
/** @brief One generation on a session (opaque). Created by strata_session_submit(). */
typedef struct strata_request strata_request;

/** @brief Severity of a log message (one of the `STRATA_LOG_*` values). */
typedef int32_t strata_log_level;
/** Detail useful when debugging. */
#define STRATA_LOG_DEBUG 0
/** Normal milestones (model loaded). */
#define STRATA_LOG_INFO 1
/** Something unexpected that the library handled (a request failed). */
#define STRATA_LOG_WARNING 2
/** A failure the host should know about. */
#define STRATA_LOG_ERROR 3

/**
 * @brief Receives the engine's log messages.
 * @param level    severity, a `STRATA_LOG_*` value
 * @param message  NUL-terminated UTF-8, valid only during the call
 * @param user_data strata_engine_params::log_user_data
 *
 * Runs on whichever library thread logs (the caller's thread or the engine's
 * scheduler thread); calls are serialised per engine. It must not call back
 * into the library. Errors are never reported only through the log.
 */
typedef void (*strata_log_callback)(strata_log_level level, const char *message, void *user_data);

/** @brief Parameters of strata_engine_create(). Fill with strata_engine_params_init(). */
typedef struct strata_engine_params {
  /** sizeof(strata_engine_params); set by strata_engine_params_init(). */
  uint32_t struct_size;
  /** Compute threads, including the calling thread of each parallel loop. 0 (default): one per core. Range [0, 1024]. */
  int32_t num_threads;
  /** Receives log messages; NULL (default): no logging. */
  strata_log_callback log_callback;
  /** Passed to log_callback unchanged; default NULL. */
  void *log_user_data;
  /** Least severe level passed to log_callback; default ::STRATA_LOG_INFO. */
  strata_log_level log_level;
} strata_engine_params;

/**
 * @brief Fills @p params with the defaults and sets its struct_size.
 * @param[out] params the struct to fill; nothing happens when NULL
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API void strata_engine_params_init(strata_engine_params *params);

/**
 * @brief Creates an engine and starts its threads.
 * @param[in]  params     may be NULL for defaults; otherwise struct_size must be set
 * @param[out] out_engine receives the new engine, owned by the caller (release with
 *                        strata_engine_destroy()); NULL on failure
 * @retval STRATA_OK                    created
 * @retval STRATA_ERR_INVALID_ARGUMENT  @p out_engine is NULL, bad struct_size, num_threads or log_level out of range
 * @retval STRATA_ERR_OUT_OF_MEMORY     allocation failed
 * @retval STRATA_ERR_INTERNAL          threads could not be started
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_engine_create(const strata_engine_params *params,
                                              strata_engine **out_engine);

/**
 * @brief Stops the engine's threads and releases it.
 *
 * Every model, session and request of the engine must be destroyed first;
 * otherwise nothing happens and ::STRATA_ERR_FAILED_PRECONDITION is returned
 * (the message counts what is left).
 *
 * @param[in] engine the engine; invalid after ::STRATA_OK
 * @retval STRATA_OK                      destroyed
 * @retval STRATA_ERR_INVALID_ARGUMENT    @p engine is NULL
 * @retval STRATA_ERR_MISUSE              @p engine was already destroyed or is not an engine
 * @retval STRATA_ERR_FAILED_PRECONDITION models, sessions or requests of this engine still exist
 * @par Thread safety: no other call may use @p engine concurrently.
 * @since 0.1
 */
STRATA_API strata_status strata_engine_destroy(strata_engine *engine);

/** @brief Kind of an event (one of the `STRATA_EVENT_*` values). */
typedef int32_t strata_event_type;
/** No event (set when strata_engine_poll_event() returns ::STRATA_AGAIN). */
#define STRATA_EVENT_NONE 0
/** A request produced a token (strata_event::token). */
#define STRATA_EVENT_TOKEN 1
/** A request ended; strata_event::finish_reason says why and strata_event::status is its outcome. Always the last event of a request. */
#define STRATA_EVENT_FINISHED 2

/** @brief Why a request ended (one of the `STRATA_FINISH_*` values). */
typedef int32_t strata_finish_reason;
/** Not finished. */
#define STRATA_FINISH_NONE 0
/** The model produced its end-of-sequence token (strata_model_info::eos_token_id). */
#define STRATA_FINISH_EOS 1
/** The model produced one of strata_request_params::stop_tokens. */
#define STRATA_FINISH_STOP_TOKEN 2
/** strata_request_params::max_tokens tokens were produced. */
#define STRATA_FINISH_MAX_TOKENS 3
/** strata_request_cancel() was called; the status is ::STRATA_ERR_CANCELLED. */
#define STRATA_FINISH_CANCELLED 4
/** The request failed; the status says how and strata_request_errmsg() explains. */
#define STRATA_FINISH_ERROR 5
/** The session reached its max_context_tokens. */
#define STRATA_FINISH_CONTEXT_FULL 6
/** strata_session_generate() only: the token callback returned nonzero. */
#define STRATA_FINISH_CALLBACK 7

/**
 * @brief One event from strata_engine_poll_event(). Output struct: set
 *        struct_size = sizeof(strata_event) before polling.
 */
typedef struct strata_event {
  /** Set by the caller to sizeof(strata_event); the library writes at most this many bytes. */
  uint32_t struct_size;
  /** ::STRATA_EVENT_TOKEN or ::STRATA_EVENT_FINISHED (::STRATA_EVENT_NONE when nothing was ready). */
  strata_event_type type;
  /** The request the event belongs to (borrowed; still owned by the caller of strata_session_submit()). */
  strata_request *request;
  /** TOKEN: the new token id. FINISHED: the EOS or stop token that ended the request, else -1. */
  int32_t token;
  /** FINISHED: the request's outcome (::STRATA_OK, ::STRATA_ERR_CANCELLED, or the error). TOKEN: ::STRATA_OK. */
  strata_status status;
  /** FINISHED: why the request ended. TOKEN: ::STRATA_FINISH_NONE. */
  strata_finish_reason finish_reason;
  /** Tokens the request has produced so far, counting this TOKEN event. */
  uint32_t num_generated_tokens;
} strata_event;

/**
 * @brief Takes the next event of any request submitted on this engine.
 *
 * Events of one request arrive in order: zero or more TOKEN events, then
 * exactly one FINISHED event. Events of requests run by
 * strata_session_generate() are never returned here, and neither are events of
 * a request after strata_request_destroy(). The scheduler produces at most 64
 * undelivered TOKEN events per request before it pauses that request, so a
 * request whose events are not polled stops making progress.
 *
 * @param[in]  engine     the engine
 * @param[out] out_event  receives the event; out_event->struct_size must be set
 * @param[in]  timeout_ms how long to wait when no event is ready: 0 returns
 *                        at once, a negative value waits until one is ready
 * @retval STRATA_OK                   an event was stored in @p out_event
 * @retval STRATA_AGAIN                no event within @p timeout_ms; out_event->type is ::STRATA_EVENT_NONE
 * @retval STRATA_ERR_INVALID_ARGUMENT NULL pointer or bad struct_size
 * @retval STRATA_ERR_MISUSE           @p engine was destroyed or is not an engine
 * @par Thread safety: safe from any thread; each event goes to exactly one poller.
 * @since 0.1
 */
STRATA_API strata_status strata_engine_poll_event(strata_engine *engine, strata_event *out_event,
                                                  int32_t timeout_ms);

/** @} */

/* ------------------------------------------------------------------------- */
/**
 * @defgroup strata_model Model
 * @brief Weights and architecture, loaded from a Hugging Face style directory.
 *
 * A model is immutable after loading and may be shared by many sessions.
 * @{
 */

/**
 * @brief Reports loading progress.
 * @param fraction  in [0, 1], non-decreasing; 1 is reported last
 * @param user_data strata_model_params::progress_user_data
 * @return true to continue, false to cancel the load (it then fails with
 *         ::STRATA_ERR_CANCELLED)
 *
 * Runs on the thread that called strata_model_load(). It must not call back into
 * the library.
 */
typedef bool (*strata_progress_callback)(float fraction, void *user_data);

/** @brief Parameters of strata_model_load(). Fill with strata_model_params_init(). */
typedef struct strata_model_params {
  /** sizeof(strata_model_params); set by strata_model_params_init(). */
  uint32_t struct_size;
  /** Called as loading advances; NULL (default): no progress reports. */
  strata_progress_callback progress_callback;
  /** Passed to progress_callback unchanged; default NULL. */
  void *progress_user_data;
} strata_model_params;

/**
 * @brief Fills @p params with the defaults and sets its struct_size.
 * @param[out] params the struct to fill; nothing happens when NULL
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API void strata_model_params_init(strata_model_params *params);

/**
 * @brief Loads a model directory (config.json plus safetensors weights).
 *
 * The weights are memory-mapped, not copied. Failure messages name the path,
 * file, field or tensor at fault.
 *
 * @param[in]  engine    the engine whose threads the model uses
 * @param[in]  model_dir NUL-terminated UTF-8 path of the directory
 * @param[in]  params    may be NULL for defaults; otherwise struct_size must be set
 * @param[out] out_model receives the model, owned by the caller (release with
 *                       strata_model_destroy()); NULL on failure
 * @retval STRATA_OK                   loaded
 * @retval STRATA_ERR_INVALID_ARGUMENT NULL pointer or bad struct_size, or a malformed config value
 * @retval STRATA_ERR_MISUSE           @p engine was destroyed or is not an engine
 * @retval STRATA_ERR_NOT_FOUND        the directory, config.json or a weights file is missing
 * @retval STRATA_ERR_UNSUPPORTED      the architecture (model_type) or a dtype is not supported
 * @retval STRATA_ERR_DATA_LOSS        a weights file is corrupt or truncated
 * @retval STRATA_ERR_CANCELLED        the progress callback returned false
 * @retval STRATA_ERR_OUT_OF_MEMORY    allocation failed
 * @par Thread safety: safe from any thread; the engine may be used concurrently.
 * @since 0.1
 */
STRATA_API strata_status strata_model_load(strata_engine *engine, const char *model_dir,
                                           const strata_model_params *params,
                                           strata_model **out_model);

/**
 * @brief Facts about a loaded model. Output struct: set struct_size = sizeof(strata_model_info).
 */
typedef struct strata_model_info {
  /** Set by the caller to sizeof(strata_model_info); the library writes at most this many bytes. */
  uint32_t struct_size;
  /** Architecture (config.json model_type), e.g. "kimi_linear"; borrowed, valid until strata_model_destroy(). */
  const char *architecture;
  /** Number of decoder layers. */
  int32_t num_layers;
  /** Vocabulary size; valid token ids are [0, vocab_size). */
  int32_t vocab_size;
  /** Hidden (residual stream) width. */
  int32_t hidden_size;
  /** Beginning-of-sequence token id, or -1 when the model has none. */
  int32_t bos_token_id;
  /** End-of-sequence token id, or -1 when the model has none. */
  int32_t eos_token_id;
  /** Number of stored parameters (elements). */
  int64_t num_parameters;
  /** Bytes of stored parameters. */
  uint64_t parameter_bytes;
  /** Longest context the model supports, in tokens. */
  int64_t max_context_tokens;
  /** Session state that grows with each token (attention caches), in bytes per token. */
  uint64_t state_bytes_per_token;
  /** Session state of fixed size (recurrent matrices, convolution tails), in bytes per session. */
  uint64_t state_bytes_per_sequence;
} strata_model_info;

/**
 * @brief Describes a model.
 * @param[in]  model    the model
 * @param[out] out_info receives the facts; out_info->struct_size must be set by the caller
 * @retval STRATA_OK                   filled
 * @retval STRATA_ERR_INVALID_ARGUMENT NULL pointer or out_info->struct_size too small
 * @retval STRATA_ERR_MISUSE           @p model was destroyed or is not a model
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_model_get_info(const strata_model *model, strata_model_info *out_info);

/**
 * @brief Releases the caller's reference to a model.
 *
 * Sessions created on the model keep using it; its memory is freed when the
 * last of them is destroyed.
 *
 * @param[in] model the model; invalid after ::STRATA_OK
 * @retval STRATA_OK                   released
 * @retval STRATA_ERR_INVALID_ARGUMENT @p model is NULL
 * @retval STRATA_ERR_MISUSE           @p model was already destroyed or is not a model
 * @par Thread safety: no other call may use @p model concurrently.
 * @since 0.1
 */
STRATA_API strata_status strata_model_destroy(strata_model *model);

/** @} */

/* ------------------------------------------------------------------------- */
/**
 * @defgroup strata_session Session
 * @brief A conversation: the token history and the model state that follows it.
 *
 * A session's history only grows (append, generate) until
 * strata_session_reset(). A session runs at most one request at a time; while
 * it does, only strata_session_destroy() and strata_request_cancel() may touch
 * it. Use a session from one thread at a time.
 * @{
 */

/** @brief Parameters of strata_session_create(). Fill with strata_session_params_init(). */
typedef struct strata_session_params {
  /** sizeof(strata_session_params); set by strata_session_params_init(). */
  uint32_t struct_size;
  /** Capacity of the history in tokens. 0 (default): min(model's max context, 4096). Must not exceed the model's max context. */
  int64_t max_context_tokens;
} strata_session_params;

/**
 * @brief Fills @p params with the defaults and sets its struct_size.
 * @param[out] params the struct to fill; nothing happens when NULL
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API void strata_session_params_init(strata_session_params *params);

/**
 * @brief Creates an empty session on a model.
 * @param[in]  model       the model (the session keeps it alive)
 * @param[in]  params      may be NULL for defaults; otherwise struct_size must be set
 * @param[out] out_session receives the session, owned by the caller (release with
 *                         strata_session_destroy()); NULL on failure
 * @retval STRATA_OK                     created
 * @retval STRATA_ERR_INVALID_ARGUMENT   NULL pointer, bad struct_size, negative max_context_tokens
 * @retval STRATA_ERR_OUT_OF_RANGE       max_context_tokens exceeds the model's max context
 * @retval STRATA_ERR_MISUSE             @p model was destroyed or is not a model
 * @retval STRATA_ERR_RESOURCE_EXHAUSTED the state for max_context_tokens does not fit in memory
 * @retval STRATA_ERR_OUT_OF_MEMORY      allocation failed
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_session_create(strata_model *model, const strata_session_params *params,
                                               strata_session **out_session);

/**
 * @brief Cancels the session's unfinished request, waits until the engine has let go of it, and releases the session.
 *
 * Requests of the session stay valid handles (finished, with reason
 * ::STRATA_FINISH_CANCELLED when they were cut short) and must still be
 * destroyed.
 *
 * @param[in] session the session; invalid after ::STRATA_OK
 * @retval STRATA_OK                   released
 * @retval STRATA_ERR_INVALID_ARGUMENT @p session is NULL
 * @retval STRATA_ERR_MISUSE           @p session was already destroyed or is not a session, or
 *                                     the call came from a token callback of this session
 * @par Thread safety: no other call may use @p session concurrently.
 * @since 0.1
 */
STRATA_API strata_status strata_session_destroy(strata_session *session);

/**
 * @brief Appends tokens to the history and runs the model over them (prefill), without generating.
 *
 * Returns when the model has consumed the tokens. Afterwards
 * strata_session_get_logits() gives the distribution of the next token.
 *
 * @param[in] session    the session
 * @param[in] tokens     @p num_tokens token ids, each in [0, vocab_size); copied
 * @param[in] num_tokens number of tokens; 0 is allowed and does nothing
 * @retval STRATA_OK                      appended; the history grew by @p num_tokens
 * @retval STRATA_ERR_INVALID_ARGUMENT    @p session is NULL, or @p tokens is NULL with @p num_tokens > 0
 * @retval STRATA_ERR_OUT_OF_RANGE        a token id is outside the vocabulary, or the history would exceed
 *                                        max_context_tokens; the session is unchanged
 * @retval STRATA_ERR_FAILED_PRECONDITION the session is running a request, or failed earlier and needs
 *                                        strata_session_reset()
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @retval other                          the model failed; the session then needs strata_session_reset()
 * @par Thread safety: one thread per session at a time; runs on the calling thread.
 * @since 0.1
 */
STRATA_API strata_status strata_session_append_tokens(strata_session *session, const int32_t *tokens,
                                                      size_t num_tokens);

/**
 * @brief Copies the logits that predict the token after the whole history.
 *
 * If the history ends with a generated token the model has not consumed yet,
 * the model runs over it first, so the logits always follow the last token.
 * Pass @p logits = NULL to ask only for the size.
 *
 * @param[in]  session   the session
 * @param[out] logits    buffer of @p capacity floats, or NULL for a size query
 * @param[in]  capacity  number of floats @p logits can hold
 * @param[out] out_count receives vocab_size (always, also on ::STRATA_ERR_OUT_OF_RANGE); may be NULL
 * @retval STRATA_OK                      copied vocab_size floats (or answered the size query)
 * @retval STRATA_ERR_INVALID_ARGUMENT    @p session is NULL
 * @retval STRATA_ERR_OUT_OF_RANGE        @p capacity < vocab_size; nothing copied
 * @retval STRATA_ERR_FAILED_PRECONDITION the history is empty, or the session is running a request
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_get_logits(strata_session *session, float *logits, size_t capacity,
                                                   size_t *out_count);

/**
 * @brief Number of tokens in the history (prompts and generated tokens).
 * @param[in]  session    the session
 * @param[out] out_tokens receives the count
 * @retval STRATA_OK                   stored
 * @retval STRATA_ERR_INVALID_ARGUMENT NULL pointer
 * @retval STRATA_ERR_MISUSE           @p session was destroyed or is not a session
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_get_num_tokens(const strata_session *session, size_t *out_tokens);

/**
 * @brief Empties the history and the model state; clears a failed state.
 * @param[in] session the session
 * @retval STRATA_OK                      reset
 * @retval STRATA_ERR_INVALID_ARGUMENT    @p session is NULL
 * @retval STRATA_ERR_FAILED_PRECONDITION the session is running a request
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_reset(strata_session *session);

/** @} */

/* ------------------------------------------------------------------------- */
/**
 * @defgroup strata_request Request
 * @brief One generation: a prompt appended to a session, then tokens sampled one by one.
 *
 * Lifecycle: strata_session_submit() → TOKEN events → one FINISHED event →
 * strata_request_destroy(). Generated tokens (and the EOS or stop token that
 * ended the request) join the session's history.
 * @{
 */

/**
 * @brief Receives each generated token in strata_session_generate().
 * @param request   the running request; borrowed, valid during the call (it may be passed to
 *                  strata_request_cancel() from another thread until strata_session_generate() returns)
 * @param token     the new token id
 * @param user_data strata_request_params::user_data
 * @return 0 to continue, nonzero to stop (the generation then ends with
 *         ::STRATA_FINISH_CALLBACK and ::STRATA_OK)
 *
 * Runs on the thread that called strata_session_generate(). It must not call
 * other functions on the same session. strata_session_submit() ignores it.
 */
typedef int (*strata_token_callback)(strata_request *request, int32_t token, void *user_data);

/** @brief Parameters of a generation. Fill with strata_request_params_init(). */
typedef struct strata_request_params {
  /** sizeof(strata_request_params); set by strata_request_params_init(). */
  uint32_t struct_size;
  /** Most tokens to generate; 0: until the context is full. Default 128. Range [0, 2^31). */
  int32_t max_tokens;
  /** Token ids that end the request when generated (copied at submit); may be NULL when num_stop_tokens is 0. Default NULL. */
  const int32_t *stop_tokens;
  /** Number of entries in stop_tokens; default 0. */
  size_t num_stop_tokens;
  /** Stop at the model's EOS token; default true. */
  bool stop_at_eos;
  /** Softmax temperature; 0 picks the most likely token (greedy). Default 0. Range [0, 100]. */
  float temperature;
  /** Keep only the k most likely tokens; 0 (default) keeps all. */
  int32_t top_k;
  /** Keep the smallest set of most likely tokens whose probability sums to at least top_p. Range (0, 1]; default 1 (off). */
  float top_p;
  /** Drop tokens less likely than min_p times the most likely one. Range [0, 1]; default 0 (off). */
  float min_p;
  /** Divides positive (multiplies negative) logits of tokens already in the prompt or output. Range (0, 100]; default 1 (off). */
  float repetition_penalty;
  /** Subtracted from the logit of every token already in the prompt or output. Range [-100, 100]; default 0. */
  float presence_penalty;
  /** Subtracted, times its count, from the logit of every token already in the prompt or output. Range [-100, 100]; default 0. */
  float frequency_penalty;
  /** Random seed; the same seed, prompt, history and parameters give the same tokens. Default 0. */
  uint64_t seed;
  /** strata_session_generate() only: receives each token; NULL (default): no callback. */
  strata_token_callback token_callback;
  /** Passed to token_callback unchanged; default NULL. */
  void *user_data;
} strata_request_params;

/**
 * @brief Fills @p params with the defaults (greedy, 128 tokens, stop at EOS) and sets its struct_size.
 * @param[out] params the struct to fill; nothing happens when NULL
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API void strata_request_params_init(strata_request_params *params);

/**
 * @brief Starts a generation on the engine's scheduler thread; returns immediately.
 *
 * The prompt is appended to the session's history, then tokens are sampled one
 * at a time and delivered as events by strata_engine_poll_event(). Arguments
 * are checked before anything is queued: on failure the session is unchanged.
 *
 * @param[in]  session           the session; it must not be running a request
 * @param[in]  prompt_tokens     @p num_prompt_tokens token ids (copied); may be NULL when the count is 0
 * @param[in]  num_prompt_tokens may be 0 to continue from the history, which must then be non-empty
 * @param[in]  params            may be NULL for defaults; otherwise struct_size must be set
 * @param[out] out_request       receives the request, owned by the caller (release with
 *                               strata_request_destroy()); NULL on failure
 * @retval STRATA_OK                      submitted
 * @retval STRATA_ERR_INVALID_ARGUMENT    NULL pointer, bad struct_size, a sampling value out of range, or
 *                                        an empty prompt on an empty session
 * @retval STRATA_ERR_OUT_OF_RANGE        a prompt or stop token id is outside the vocabulary, or the prompt
 *                                        leaves no room in the context for a generated token
 * @retval STRATA_ERR_FAILED_PRECONDITION the session is running a request or needs strata_session_reset()
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @retval STRATA_ERR_OUT_OF_MEMORY       allocation failed
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_submit(strata_session *session, const int32_t *prompt_tokens,
                                               size_t num_prompt_tokens, const strata_request_params *params,
                                               strata_request **out_request);

/**
 * @brief Generates on the calling thread's behalf: submit, then wait for the tokens and pass each to the callback.
 *
 * Equivalent to strata_session_submit() followed by polling this request's
 * events only; the token callback runs on the calling thread. The request
 * handle exists only during the call.
 *
 * @param[in]  session           the session; it must not be running a request
 * @param[in]  prompt_tokens     as strata_session_submit()
 * @param[in]  num_prompt_tokens as strata_session_submit()
 * @param[in]  params            as strata_session_submit(); token_callback and user_data are used
 * @param[out] out_finish_reason receives why the generation ended; may be NULL
 * @retval STRATA_OK             finished by EOS, a stop token, max_tokens, a full context or the callback
 * @retval STRATA_ERR_CANCELLED  strata_request_cancel() was called on the request (from the callback or
 *                               another thread)
 * @retval other                 the codes of strata_session_submit(), or the error that ended the generation
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_generate(strata_session *session, const int32_t *prompt_tokens,
                                                 size_t num_prompt_tokens, const strata_request_params *params,
                                                 strata_finish_reason *out_finish_reason);

/**
 * @brief Asks a request to stop; returns at once.
 *
 * The request ends before its next token with ::STRATA_FINISH_CANCELLED and
 * status ::STRATA_ERR_CANCELLED, unless it already finished (then nothing
 * changes). Cancelling twice is harmless.
 *
 * @param[in] request the request
 * @retval STRATA_OK                   cancellation requested (or the request had already finished)
 * @retval STRATA_ERR_INVALID_ARGUMENT @p request is NULL
 * @retval STRATA_ERR_MISUSE           @p request was destroyed or is not a request
 * @par Thread safety: safe from any thread, including a token callback.
 * @since 0.1
 */
STRATA_API strata_status strata_request_cancel(strata_request *request);

/**
 * @brief Reads a request's progress.
 * @param[in]  request           the request
 * @param[out] out_finished      receives true once the FINISHED event has been produced; may be NULL
 * @param[out] out_finish_reason receives the finish reason (::STRATA_FINISH_NONE while running); may be NULL
 * @param[out] out_status        receives the outcome (::STRATA_OK while running); may be NULL
 * @retval STRATA_OK                   stored
 * @retval STRATA_ERR_INVALID_ARGUMENT @p request is NULL
 * @retval STRATA_ERR_MISUSE           @p request was destroyed or is not a request
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_request_get_status(strata_request *request, bool *out_finished,
                                                   strata_finish_reason *out_finish_reason,
                                                   strata_status *out_status);

/**
 * @brief Explains why a request failed.
 * @param[in] request the request
 * @return "" while the request runs or when it succeeded; otherwise the failure message.
 *         Owned by @p request, valid until the next call with it. For a NULL or destroyed handle,
 *         a static message saying so.
 * @par Thread safety: one thread at a time per request.
 * @since 0.1
 */
STRATA_API const char *strata_request_errmsg(strata_request *request);

/**
 * @brief Releases a request; cancels it first if it is still running.
 *
 * Returns without waiting for the scheduler; no event of the request is
 * returned by strata_engine_poll_event() afterwards (events already returned
 * keep the dangling handle: do not use it).
 *
 * @param[in] request the request; invalid after ::STRATA_OK
 * @retval STRATA_OK                   released
 * @retval STRATA_ERR_INVALID_ARGUMENT @p request is NULL
 * @retval STRATA_ERR_MISUSE           @p request was already destroyed or is not a request
 * @par Thread safety: no other call may use @p request concurrently.
 * @since 0.1
 */
STRATA_API strata_status strata_request_destroy(strata_request *request);

/** @} */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_STRATA_H_ */
