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
 *    failure in English, starting with the function's name. No exception, abort
 *    or exit ever leaves the library: a failed allocation is
 *    ::STRATA_ERR_OUT_OF_MEMORY naming the function and what it was doing (e.g.
 *    "strata_model_load: out of memory while loading the model's weights"), and
 *    ::STRATA_ERR_INTERNAL is kept for bugs in Strata, never for bad input.
 *    Input from outside (model directories, JSON strings, chat templates, model
 *    output) is bounded so that it cannot take the host down either: JSON
 *    nested deeper than 256 levels is ::STRATA_ERR_INVALID_ARGUMENT, chat
 *    templates have limits on nesting, work and size (exceeding one fails like
 *    a template error, naming its line and column), and nothing recurses past
 *    the calling thread's stack (threads of 256 KB are enough).
 * 3. **Parameter structs** begin with `uint32_t struct_size`. Fill input
 *    structs with their `_init()` macro and then change fields: the macro
 *    passes the caller's `sizeof`, so the library never writes more bytes than
 *    the caller's struct has (a program built against an older, shorter
 *    header gets the defaults of the fields it knows). The library reads at
 *    most `struct_size` bytes and uses defaults for the rest; a `struct_size`
 *    smaller than the first released layout (0.1), larger than this library
 *    knows with a non-zero unknown tail, or above 4096 (no struct of this API
 *    grows that large; nothing is read then) is ::STRATA_ERR_INVALID_ARGUMENT.
 *    Output structs (strata_model_info, strata_metrics, strata_event) are sized
 *    by the caller: set `struct_size = sizeof(x)` and the library writes at
 *    most that many bytes. Bindings that mirror a struct check their layout
 *    with strata_abi_struct_size() and strata_abi_field_offset().
 * 4. **Types.** Fixed-width integers; enumerations are `int32_t` typedefs with
 *    named constants; booleans are C99 `bool`; token ids are `int32_t`; counts
 *    are `size_t`. Strings are NUL-terminated UTF-8; text passed in that is
 *    not UTF-8 is ::STRATA_ERR_INVALID_ARGUMENT naming the argument and the
 *    byte offset.
 * 5. **Memory.** The library never hands the caller memory to free. Strings it
 *    returns are borrowed; each function says how long they stay valid. Arrays
 *    and strings the caller passes in are copied before the call returns.
 *    Bulk outputs (token ids, text) go to caller buffers: pass NULL to ask for
 *    the size, and the `out_` count says how much was (or would be) written.
 *    A length of ::STRATA_NUL_TERMINATED means "up to the NUL". Lengths and
 *    counts passed in are below 2^31; a larger one is
 *    ::STRATA_ERR_INVALID_ARGUMENT before anything is read.
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
 *    or strata_session_generate() / strata_session_submit() for generation;
 *    or, with text: strata_session_add_tool(), strata_session_add_message(),
 *    then strata_session_chat() / strata_session_submit_chat()
 * 5. destroy in reverse order: requests, sessions, models, engine.
 *
 * @par Not offered (yet)
 * Images, batched scoring of many positions, saving session state to bytes
 * or files, and models split over several GPUs. Those arrive as new
 * functions; nothing here will change meaning.
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
/** Bad input regardless of state: NULL pointer, bad struct_size, value out of its documented range, text that is
 *  not UTF-8, malformed file contents (JSON, config values, a weights file's header). */
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
/** Stored data is truncated or contradicts itself (a weights file shorter than its header says, tensor data past its
 *  end). */
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

/**
 * @brief The size of a public struct as this library was built, for bindings that mirror structs.
 *
 * A binding (ctypes, cffi, Rust, Go) that declares its own copy of a struct
 * compares its size and every field's offset with the library's at start-up,
 * so a copy that drifted from the header is refused instead of corrupting
 * memory.
 *
 * @param[in]  struct_name NUL-terminated name as in this header, e.g. "strata_request_params"
 * @param[out] out_size    receives `sizeof` of the struct
 * @retval STRATA_OK                   written
 * @retval STRATA_ERR_INVALID_ARGUMENT a NULL pointer
 * @retval STRATA_ERR_NOT_FOUND        no public struct of that name
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_abi_struct_size(const char *struct_name, size_t *out_size);

/**
 * @brief The offset of a field of a public struct as this library was built (see strata_abi_struct_size()).
 * @param[in]  struct_name NUL-terminated struct name, e.g. "strata_event"
 * @param[in]  field_name  NUL-terminated field name, e.g. "tool_arguments_len"
 * @param[out] out_offset  receives `offsetof(struct, field)`
 * @retval STRATA_OK                   written
 * @retval STRATA_ERR_INVALID_ARGUMENT a NULL pointer
 * @retval STRATA_ERR_NOT_FOUND        no such struct, or no such field in it
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_abi_field_offset(const char *struct_name, const char *field_name,
                                                 size_t *out_offset);

/** @} */

/* ------------------------------------------------------------------------- */
/**
 * @defgroup strata_engine Engine
 * @brief The root object: worker threads, the request queue and the event queue.
 *
 * An engine owns a pool of compute threads and one scheduler thread that runs
 * every submitted request with continuous batching: each iteration runs one
 * batched decode step over the running requests (up to a batch limit) and
 * prompt chunks within a prefill budget (chunked prefill), ordered by priority
 * (docs/serving.md). It is thread-safe.
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

/** @brief Percentiles of one latency over the engine's most recent 4096 samples, in milliseconds. */
typedef struct strata_latency {
  /** Samples ever recorded (not only those in the window). */
  int64_t count;
  /** Mean of the window. */
  double mean_ms;
  /** Median. */
  double p50_ms;
  /** 90th percentile. */
  double p90_ms;
  /** 99th percentile. */
  double p99_ms;
  /** Largest sample of the window. */
  double max_ms;
} strata_latency;

/**
 * @brief Serving metrics of an engine. Output struct: set struct_size = sizeof(strata_metrics).
 *
 * Memory is the engine's accounting by the models' state sizes
 * (strata_model_info::state_bytes_per_token and state_bytes_per_sequence),
 * by kind (attention rows, recurrent state, prefix-cache snapshots) and tier
 * (resident within the budget, or moved aside by a preemption). Diagnostics
 * that may change between releases (scheduler phase timings, where tokens
 * were sampled, pool evictions) are named statistics instead: see
 * strata_engine_get_stat().
 * @since 0.1
 */
typedef struct strata_metrics {
  /** sizeof(strata_metrics); set by the caller. */
  uint32_t struct_size;
  /** Requests accepted by a submit call. */
  int64_t requests_submitted;
  /** Requests that ended (any reason). */
  int64_t requests_finished;
  /** Requests that ran in the scheduler's last iteration. */
  int64_t requests_running;
  /** Requests that wanted to run in the last iteration but waited (memory, batch slots, prefill budget). */
  int64_t requests_waiting;
  /** Times a running request's state was moved out of the memory budget to resume later. */
  int64_t preemptions;
  /** Requests that ended with ::STRATA_FINISH_DEADLINE. */
  int64_t deadline_misses;
  /** Time to first token: submit to the first generated token. */
  strata_latency ttft;
  /** Time per output token: between consecutive generated tokens of a request. */
  strata_latency tpot;
  /** Queue time: submit to the request's first scheduled work. */
  strata_latency queue;
  /** Prompt tokens that requests needed evaluated when the prefix cache was asked. */
  int64_t prefix_lookup_tokens;
  /** Of those, tokens restored from the prefix cache (hit rate = hit / lookup). */
  int64_t prefix_hit_tokens;
  /** Tokens run through prefill. */
  int64_t prefill_tokens;
  /** Tokens generated. */
  int64_t generated_tokens;
  /** Batched decode steps run. */
  int64_t decode_steps;
  /** Rows over all decode steps (mean batch size = decode_rows / decode_steps). */
  int64_t decode_rows;
  /** strata_engine_params::memory_budget_bytes (0: unlimited). */
  uint64_t memory_budget_bytes;
  /** Sequence state within the budget (attention + recurrent). */
  uint64_t state_resident_bytes;
  /** Of the resident state: attention rows (grow per token). */
  uint64_t state_attention_bytes;
  /** Of the resident state: recurrent state slots and conv tails (fixed per sequence). */
  uint64_t state_recurrent_bytes;
  /** State of preempted requests, moved aside (host tier). */
  uint64_t state_swapped_bytes;
  /** Snapshots held by the prefix cache (marks included). */
  uint64_t prefix_cache_bytes;
  /** Entries of the prefix cache. */
  int64_t prefix_cache_entries;
  /** Of the resident state: sessions running a request, the part the memory budget bounds together with
   *  prefix_cache_bytes (idle sessions' states are the host's to reset or destroy). */
  uint64_t state_active_bytes;
} strata_metrics;

/**
 * @brief Receives the engine's metrics periodically (strata_engine_params::metrics_interval_ms).
 * @param metrics   the metrics, valid only during the call
 * @param user_data strata_engine_params::metrics_user_data
 *
 * Runs on the engine's scheduler thread, between scheduling iterations: keep
 * it short. It must not call back into the library.
 */
typedef void (*strata_metrics_callback)(const strata_metrics *metrics, void *user_data);

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
  /** Bytes of running requests' sequence state plus prefix-cache snapshots the scheduler keeps resident
   *  (strata_metrics::state_active_bytes + prefix_cache_bytes); growth is planned before it is applied, and
   *  when it is short the prefix cache is evicted, then lower-priority requests are preempted (resumed
   *  later), else a request waits; a request whose longest state (prompt and history plus max_tokens, at most
   *  the context) cannot fit even alone is refused at submit with ::STRATA_ERR_RESOURCE_EXHAUSTED. 0 (default):
   *  unlimited. @since 0.1 */
  uint64_t memory_budget_bytes;
  /** Most requests in one batched decode step. 0: the default, 64. @since 0.1 */
  int32_t max_batch;
  /** Capacity of the exact prefix cache in bytes (snapshots of whole model states at shared prefixes and
   *  marks, see strata_session_mark()); 0 (default) turns it off. @since 0.1 */
  uint64_t prefix_cache_bytes;
  /** Block size of the prefix cache's chained hashes, in tokens. 0: the default, 64. @since 0.1 */
  int32_t prefix_block_tokens;
  /** Receives the metrics every metrics_interval_ms; NULL (default): none. @since 0.1 */
  strata_metrics_callback metrics_callback;
  /** Passed to metrics_callback unchanged; default NULL. @since 0.1 */
  void *metrics_user_data;
  /** Period of metrics_callback in milliseconds. 0: the default, 1000. @since 0.1 */
  int32_t metrics_interval_ms;
  /** Scheduler tuning as a NUL-terminated `key=value` list separated by commas, e.g.
   *  `"scheduler.prefill_chunk_tokens=2048,scheduler.prefill_tokens_while_decoding=512"`; copied. Unknown keys
   *  and malformed values fail strata_engine_create() with ::STRATA_ERR_INVALID_ARGUMENT naming them. Keys:
   *  - `scheduler.prefill_chunk_tokens`: prompt tokens evaluated per scheduling iteration over all requests,
   *    so long prompts are fed in chunks between decode steps; 0 (default): automatic by where the model runs
   *    (512 on the CPU, 8192 on a GPU, whose prefill rate needs large chunks).
   *  - `scheduler.prefill_tokens_while_decoding`: the prefill budget of an iteration that also runs a decode
   *    step, i.e. how long running requests may stall behind prompts per generated token (TPOT), traded
   *    against time to first token; never more than the chunk. 0 (default): automatic (the chunk on the CPU,
   *    2048 on a GPU).
   *  - `sampling.on_device`: 1 (default): decode steps select tokens on the GPU where the model and the
   *    request's sampling allow (counted as `sampling.device_rows`, see strata_engine_get_stat()); 0: every
   *    row's logits are copied to the host sampler, to measure what device sampling saves. No effect on the CPU.
   *  - `kv.disk_dir`: a directory for a disk tier under the prefix cache (created when missing; the path
   *    cannot hold ',' or '='): every entry the prefix cache takes is also written there as a checksummed
   *    state object named by the SHA-256 chain of its tokens under the model's fingerprint, and a request
   *    whose prompt the cache does not cover looks there first, on the engine's I/O thread (the request
   *    waits for its own lookup, the scheduler does not). Engines of other processes on the same directory
   *    share the prefixes, exactly; an object that fails its checks is a miss (`kv_tiers.disk.*` stats).
   *    Needs the prefix cache on (prefix_cache_bytes > 0, else strata_engine_create() fails with
   *    ::STRATA_ERR_INVALID_ARGUMENT) and serves models on the CPU.
   *  - `kv.disk_bytes`: the disk tier's capacity in bytes (default 8 GiB); least recently used objects go.
   *  - `kv.disk_policy`: `all` (default) writes every entry the prefix cache takes; `reused` only marks
   *    and entries a later request hit (shared prompts go down, one-off tails do not).
   *  - `kv.disk_shutdown_ms`: how long strata_engine_destroy() may spend writing the entries still queued
   *    for the disk tier (default 10000); the rest are not written.
   *
   *  NULL or "" (default): all defaults. */
  const char *options;
} strata_engine_params;

/**
 * @brief Fills the caller's @p params with the defaults and sets its struct_size.
 *
 * Call it through the strata_engine_params_init() macro, which passes `sizeof(*params)`.
 * The library writes at most @p struct_size bytes: the fields of the
 * caller's layout, never past it.
 *
 * @param[out] params       the struct to fill
 * @param[in]  struct_size bytes of the caller's struct (its `sizeof`)
 * @retval STRATA_OK                   filled; struct_size = min(@p struct_size, this library's size)
 * @retval STRATA_ERR_INVALID_ARGUMENT @p params is NULL, or @p struct_size is smaller than the first released
 *                                     layout (nothing written)
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_engine_params_init_sized(strata_engine_params *params, size_t struct_size);
/** @brief Fills @p p (a `strata_engine_params *`) with the defaults; see strata_engine_params_init_sized(). */
#define strata_engine_params_init(p) strata_engine_params_init_sized((p), sizeof(*(p)))

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

/**
 * @brief Reads the engine's serving metrics now.
 * @param[in]  engine      the engine
 * @param[out] out_metrics receives the metrics; out_metrics->struct_size must be set by the caller
 * @retval STRATA_OK                   written
 * @retval STRATA_ERR_INVALID_ARGUMENT NULL pointer or out_metrics->struct_size too small
 * @retval STRATA_ERR_MISUSE           @p engine was destroyed or is not an engine
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_engine_get_metrics(strata_engine *engine, strata_metrics *out_metrics);

/**
 * @brief Reads one named statistic of the engine now.
 *
 * Every field of strata_metrics has a name here too (e.g.
 * `requests.submitted`, `ttft.p99_ms`, `memory.state_resident_bytes`), and so
 * do diagnostics that are not part of the stable struct: the scheduler's
 * phase timings (`scheduler.iterations`, `scheduler.schedule_ms`,
 * `scheduler.prefill_ms`, `scheduler.decode_ms`, `scheduler.sample_ms`,
 * `scheduler.emit_ms`), where tokens were sampled (`sampling.device_rows`,
 * `sampling.host_rows` for decode rows; `sampling.device_first_tokens` for
 * first tokens selected on the device by the prefill's last forward), decode
 * steps that carried a prefill chunk in the same pass
 * (`decode.steps_with_prefill`) and GPU pool pressure
 * (`prefix_cache.slot_evictions`), and settings the engine resolved
 * (`engine.compute_threads`: strata_engine_params::num_threads, with 0 resolved
 * to the core count). strata_engine_list_stats() enumerates
 * them. New names may appear in any release; a name is never reused for a
 * different quantity.
 *
 * @param[in]  engine    the engine
 * @param[in]  name      NUL-terminated name
 * @param[out] out_value receives the value (counts are exact up to 2^53)
 * @retval STRATA_OK                   written
 * @retval STRATA_ERR_INVALID_ARGUMENT a NULL pointer
 * @retval STRATA_ERR_NOT_FOUND        no statistic of that name
 * @retval STRATA_ERR_MISUSE           @p engine was destroyed or is not an engine
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_engine_get_stat(strata_engine *engine, const char *name, double *out_value);

/**
 * @brief Names the engine's statistics one by one: index 0, 1, ... until ::STRATA_ERR_OUT_OF_RANGE.
 * @param[in]  engine   the engine
 * @param[in]  index    position in the list
 * @param[out] out_name receives the name, a static string (never freed); NULL past the end
 * @retval STRATA_OK                   named
 * @retval STRATA_ERR_INVALID_ARGUMENT a NULL pointer
 * @retval STRATA_ERR_OUT_OF_RANGE     @p index is past the last statistic
 * @retval STRATA_ERR_MISUSE           @p engine was destroyed or is not an engine
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_engine_list_stats(strata_engine *engine, size_t index, const char **out_name);

/** @brief Kind of an event (one of the `STRATA_EVENT_*` values). */
typedef int32_t strata_event_type;
/** No event (set when strata_engine_poll_event() returns ::STRATA_AGAIN). */
#define STRATA_EVENT_NONE 0
/** A request produced a token (strata_event::token). */
#define STRATA_EVENT_TOKEN 1
/** A request ended; strata_event::finish_reason says why and strata_event::status is its outcome. Always the last event of a request. */
#define STRATA_EVENT_FINISHED 2
/** Chat requests: new text (strata_event::text), complete UTF-8, tool-call markup removed. @since 0.1 */
#define STRATA_EVENT_TEXT 3
/** Chat requests: the model called a registered tool (strata_event::tool_call_id, tool_name, tool_arguments).
 *  Answer it with strata_request_submit_tool_result(). @since 0.1 */
#define STRATA_EVENT_TOOL_CALL 4
/** Chat requests: a malformed tool call, or a call of a tool that is not registered (strata_event::text says
 *  which; tool_name is set when readable). Nothing is called; the conversation stays usable. @since 0.1 */
#define STRATA_EVENT_TOOL_ERROR 5

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
/** The request failed; the status says how and strata_request_error_message() explains. */
#define STRATA_FINISH_ERROR 5
/** The session reached its max_context_tokens. */
#define STRATA_FINISH_CONTEXT_FULL 6
/** strata_session_generate() / strata_session_chat() only: the token or event callback returned nonzero. */
#define STRATA_FINISH_CALLBACK 7
/** Chat requests: the text reached one of strata_chat_params::stop_strings (not part of the text). @since 0.1 */
#define STRATA_FINISH_STOP_STRING 8
/** Chat requests: the model called tools and a call was declined (strata_request_submit_tool_result() with
 *  NULL content, or a tool without callback in strata_session_chat()), or strata_chat_params::max_tool_rounds
 *  was reached. The calls stay unanswered in the conversation: add tool messages and chat again. @since 0.1 */
#define STRATA_FINISH_TOOL_CALLS 9
/** strata_request_params::deadline_ms passed before the request ended; the status is
 *  ::STRATA_ERR_DEADLINE_EXCEEDED. @since 0.1 */
#define STRATA_FINISH_DEADLINE 10

/**
 * @brief Static lowercase name of a finish reason, for logs and tools: "none", "eos", "stop_token",
 *        "max_tokens", "cancelled", "error", "context_full", "callback", "stop_string", "tool_calls", "deadline".
 * @param[in] reason any value, known or not
 * @return a NUL-terminated string with static storage duration; never NULL. Unknown values give "unknown".
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API const char *strata_finish_reason_string(strata_finish_reason reason);

/**
 * @brief One event from strata_engine_poll_event(). Output struct: set
 *        struct_size = sizeof(strata_event) before polling.
 */
typedef struct strata_event {
  /** Set by the caller to sizeof(strata_event); the library writes at most this many bytes. */
  uint32_t struct_size;
  /** A `STRATA_EVENT_*` value (::STRATA_EVENT_NONE when nothing was ready); treat unknown values as events to skip. */
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
  /** TEXT: the text; TOOL_ERROR: what went wrong. text_len bytes followed by a NUL (use text_len: the text
   *  may contain NUL bytes). Borrowed, valid until this thread's next strata_engine_poll_event() (in a
   *  callback: during the call). NULL for other events. @since 0.1 */
  const char *text;
  /** Bytes in text. @since 0.1 */
  size_t text_len;
  /** TOOL_CALL (and TOOL_ERROR for an unknown tool): the call's id, NUL-terminated; NULL otherwise. Same lifetime as text. @since 0.1 */
  const char *tool_call_id;
  /** TOOL_CALL: the tool's name; TOOL_ERROR: the name when it was readable, else NULL. NUL-terminated; same lifetime as text. @since 0.1 */
  const char *tool_name;
  /** TOOL_CALL: the arguments as a canonical JSON object (sorted keys, no spaces); TOOL_ERROR: the rejected markup.
   *  A NUL follows it; same lifetime as text; NULL otherwise. @since 0.1 */
  const char *tool_arguments;
  /** Bytes in tool_arguments. @since 0.1 */
  size_t tool_arguments_len;
} strata_event;

/**
 * @brief Takes the next event of any request submitted on this engine.
 *
 * Events of one request arrive in order: zero or more TOKEN events (chat
 * requests: TEXT, TOOL_CALL and TOOL_ERROR events), then exactly one FINISHED
 * event. The strings of an event stay valid until this thread polls again. Events of requests run by
 * strata_session_generate() are never returned here, and neither are events of
 * a request after strata_request_destroy(). The scheduler produces at most 64
 * undelivered events per request before it pauses that request, so a
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
 * @return 0 to continue, nonzero to cancel the load (it then fails with
 *         ::STRATA_ERR_CANCELLED), like every other callback of this API
 *
 * Runs on the thread that called strata_model_load(). It must not call back into
 * the library.
 */
typedef int (*strata_progress_callback)(float fraction, void *user_data);

/** @brief Where a model runs (one of the `STRATA_DEVICE_*` values). */
typedef int32_t strata_device;
/** The GPU when one is usable (a CUDA build, a driver, a Hopper device, enough free memory, kernels that accept
 *  the model's shapes), otherwise the CPU; strata_model_info::device_notice then says why. Never fails only
 *  because there is no GPU. The default. */
#define STRATA_DEVICE_AUTO 0
/** The CPU (fp32 compute from the stored weights). */
#define STRATA_DEVICE_CPU 1
/** A CUDA GPU, strictly: when the model cannot run on device strata_model_params::device_index,
 *  strata_model_load() fails with ::STRATA_ERR_UNAVAILABLE (the message says why) instead of falling back. */
#define STRATA_DEVICE_CUDA 2

/** @brief Parameters of strata_model_load(). Fill with strata_model_params_init(). */
typedef struct strata_model_params {
  /** sizeof(strata_model_params); set by strata_model_params_init(). */
  uint32_t struct_size;
  /** Called as loading advances; NULL (default): no progress reports. */
  strata_progress_callback progress_callback;
  /** Passed to progress_callback unchanged; default NULL. */
  void *progress_user_data;
  /** Where the model runs; default ::STRATA_DEVICE_AUTO. */
  strata_device device;
  /** CUDA device ordinal (as CUDA_VISIBLE_DEVICES numbers them) for ::STRATA_DEVICE_CUDA and
   *  ::STRATA_DEVICE_AUTO; default 0. Must be >= 0. */
  int32_t device_index;
  /** GPU plan, sized once at load (ignored on the CPU). Rows of one batched decode step; 0 (default): 64. Must be
   *  >= 0. */
  int64_t max_batch;
  /** GPU: sequence states that can exist at once (sessions and forks draw from this pool); 0 (default):
   *  max_batch. Must be >= 0. Prefix-cache snapshots, marks and chat turn checkpoints hold none: the executor
   *  keeps as many checkpoint slots beside them on the device (beyond those, a checkpoint's recurrent state
   *  goes to pinned host memory). */
  int64_t max_sequences;
  /** GPU: the longest sequence state in tokens; 0 (default): min(the model's max context, 131072). Must be >= 0. */
  int64_t max_context_tokens;
  /** GPU: tokens per prefill pass (longer prompts run in slices); 0 (default): the executor's own (8192 for
   *  kimi_linear, 4096 for qwen3_next, 2048 for deepseek_v32). Must be >= 0. */
  int64_t prefill_slice_tokens;
  /** GPU: fraction of the device's free memory at load the model may take (weights, scratch, then the paged
   *  attention cache from the rest). Range (0, 1]; default 0.92. */
  double gpu_memory_fraction;
  /** GPU: capture decode steps in CUDA graphs; default true. */
  bool cuda_graphs;
  /** GPU: batch-invariant kernels: every row's result is bit-identical whatever shares its batch and wherever a
   *  prompt is cut into prefill calls, so greedy output does not depend on the schedule (costs speed; the CPU
   *  always is). Default false. A GPU executor that cannot honour it fails the load (::STRATA_DEVICE_AUTO then
   *  runs on the CPU). */
  bool batch_invariant;
  /** Benchmarks only: read config.json alone and fill the weights with random values (made on the device for a
   *  GPU), so a real model's exact shapes run without its files. Such a model computes nonsense. Default false. */
  bool dummy_weights;
  /** Seed of the dummy weights; default 0. */
  uint64_t dummy_seed;
  /** Kernel tuning as a NUL-terminated `key=value` list separated by commas; copied. Each key of the tuning
   *  registry (docs/tuning.md; `strata info --options` prints it) selects between kernels or code paths that
   *  compute the same thing, so a faulty kernel can be switched off without a rebuild; `rollback=FAMILY` or
   *  `rollback=all` sets a family's (or every) entry to its reference path. Applied over the environment
   *  variable STRATA_OPTIONS; the values that differ from the defaults are reported in
   *  strata_model_info::tuning. An unknown key, a key given twice or a bad value fails the load with
   *  ::STRATA_ERR_INVALID_ARGUMENT naming it, on every device (never silently ignored; on the CPU no entry
   *  applies). NULL or "" (default): the defaults. */
  const char *options;
  /** Reads every stored weight once at load (on the host, before any copy to a GPU) and fails the load with
   *  ::STRATA_ERR_DATA_LOSS naming the first tensor (in name order) that holds a NaN or an infinity, its file and
   *  the element's index. It touches every page of the checkpoint, so loading takes longer. Dummy weights made on
   *  a GPU are not read (they are finite by construction). Default false. */
  bool check_weights;
} strata_model_params;

/**
 * @brief Fills the caller's @p params with the defaults and sets its struct_size.
 *
 * Call it through the strata_model_params_init() macro, which passes `sizeof(*params)`.
 * The library writes at most @p struct_size bytes: the fields of the
 * caller's layout, never past it.
 *
 * @param[out] params       the struct to fill
 * @param[in]  struct_size bytes of the caller's struct (its `sizeof`)
 * @retval STRATA_OK                   filled; struct_size = min(@p struct_size, this library's size)
 * @retval STRATA_ERR_INVALID_ARGUMENT @p params is NULL, or @p struct_size is smaller than the first released
 *                                     layout (nothing written)
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_model_params_init_sized(strata_model_params *params, size_t struct_size);
/** @brief Fills @p p (a `strata_model_params *`) with the defaults; see strata_model_params_init_sized(). */
#define strata_model_params_init(p) strata_model_params_init_sized((p), sizeof(*(p)))

/**
 * @brief Loads a model directory (config.json plus safetensors weights).
 *
 * On the CPU the weights are memory-mapped, not copied; on a GPU they are
 * copied to the device, and the state pools, scratch and CUDA graphs are
 * planned once from strata_model_params. strata_model_get_info() says where
 * the model ended up. Failure messages name the path, file, field or tensor
 * at fault.
 *
 * @param[in]  engine    the engine whose threads the model uses
 * @param[in]  model_dir NUL-terminated UTF-8 path of the directory
 * @param[in]  params    may be NULL for defaults; otherwise struct_size must be set
 * @param[out] out_model receives the model, owned by the caller (release with
 *                       strata_model_destroy()); NULL on failure
 * @retval STRATA_OK                   loaded
 * @retval STRATA_ERR_INVALID_ARGUMENT NULL pointer, bad struct_size, a params field out of its range, a malformed
 *                                     options string, a config.json value that is malformed, outside its sane
 *                                     range (e.g. more than 4096 layers), contradicts another field, or sizes a
 *                                     model too large for any host (the message names the file and the fields),
 *                                     a duplicate key in config.json (named with its byte offset), a special
 *                                     token id outside the vocabulary, a malformed weights file header (the file
 *                                     and the byte offset), or a directory or FIFO where the model needs a file
 * @retval STRATA_ERR_MISUSE           @p engine was destroyed or is not an engine
 * @retval STRATA_ERR_NOT_FOUND        the directory, config.json or a weights file is missing
 * @retval STRATA_ERR_UNSUPPORTED      the architecture (model_type) or a dtype is not supported
 * @retval STRATA_ERR_DATA_LOSS        a weights file is truncated or its tensors run past its end, or (with
 *                                     strata_model_params::check_weights) a weight is NaN or infinite
 * @retval STRATA_ERR_CANCELLED        the progress callback returned nonzero
 * @retval STRATA_ERR_UNAVAILABLE      ::STRATA_DEVICE_CUDA was asked and the model cannot run on that GPU
 *                                     (no CUDA build, driver or device, not enough memory, shapes its kernels
 *                                     do not accept); the message says which
 * @retval STRATA_ERR_RESOURCE_EXHAUSTED dummy weights too large for the host
 * @retval STRATA_ERR_OUT_OF_MEMORY    a host allocation failed (the message says what was being built)
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
  /** Where the model runs: "cpu", or "cuda:<index> <device name>" (e.g. "cuda:0 NVIDIA H200"); borrowed, valid
   *  until strata_model_destroy(). */
  const char *device;
  /** Empty, or why the model runs somewhere other than asked (::STRATA_DEVICE_AUTO fell back to the CPU, e.g.
   *  "device auto: this build of Strata has no CUDA backend ...; running on the CPU"); same lifetime as device. */
  const char *device_notice;
  /** The tuning options the model runs with that differ from their defaults, as an options string (e.g.
   *  "cuda.pdl=0,moe.gemm=mma"; from the environment variable STRATA_OPTIONS and strata_model_params::options,
   *  docs/tuning.md), or empty when all are defaults. Only GPU executors have options that apply: on the CPU
   *  it is always empty. Same lifetime as device. */
  const char *tuning;
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
 * strata_session_reset(), except that a chat turn may rewind it to the
 * checkpoint where the previous turn's generation began when the chat
 * template re-renders earlier turns differently (see @ref strata_chat). A session runs at most one request at a time; while
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
 * @brief Fills the caller's @p params with the defaults and sets its struct_size.
 *
 * Call it through the strata_session_params_init() macro, which passes `sizeof(*params)`.
 * The library writes at most @p struct_size bytes: the fields of the
 * caller's layout, never past it.
 *
 * @param[out] params       the struct to fill
 * @param[in]  struct_size bytes of the caller's struct (its `sizeof`)
 * @retval STRATA_OK                   filled; struct_size = min(@p struct_size, this library's size)
 * @retval STRATA_ERR_INVALID_ARGUMENT @p params is NULL, or @p struct_size is smaller than the first released
 *                                     layout (nothing written)
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_session_params_init_sized(strata_session_params *params, size_t struct_size);
/** @brief Fills @p p (a `strata_session_params *`) with the defaults; see strata_session_params_init_sized(). */
#define strata_session_params_init(p) strata_session_params_init_sized((p), sizeof(*(p)))

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
 * @brief Empties the history, the model state and the conversation's messages; clears a failed state.
 *
 * Tools registered with strata_session_add_tool() stay registered.
 * @param[in] session the session
 * @retval STRATA_OK                      reset
 * @retval STRATA_ERR_INVALID_ARGUMENT    @p session is NULL
 * @retval STRATA_ERR_FAILED_PRECONDITION the session is running a request
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_reset(strata_session *session);

/**
 * @brief Branches a conversation: a new session that continues from this one's history.
 *
 * The new session has the same model, context size, history, model state,
 * marks, conversation messages and tools; afterwards the two evolve
 * independently (generation on one never changes the other). The model
 * state is copied whole on the CPU; on the GPU the recurrent state is copied
 * into a slot of the executor's state pool while full attention-cache blocks
 * are shared copy-on-write (only the partly filled last block is copied).
 *
 * @param[in]  session     the session to branch; it must not be running a request
 * @param[out] out_session receives the new session, owned by the caller (release with
 *                         strata_session_destroy() before the engine); NULL on failure
 * @retval STRATA_OK                      forked
 * @retval STRATA_ERR_INVALID_ARGUMENT    a NULL pointer
 * @retval STRATA_ERR_FAILED_PRECONDITION the session is running a request or failed earlier
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @retval STRATA_ERR_OUT_OF_MEMORY       allocation failed
 * @retval STRATA_ERR_RESOURCE_EXHAUSTED the model has no room for another state copy (the GPU state pool is full)
 * @par Thread safety: one thread per session at a time; the new session is independent.
 * @since 0.1
 */
STRATA_API strata_status strata_session_fork(strata_session *session, strata_session **out_session);

/**
 * @brief Marks the current point of the conversation (end of a system prompt, a turn, a tool result).
 *
 * Evaluates a pending generated token, then keeps the model state at this
 * point: strata_session_rollback() returns to it, and while the mark exists
 * its prefix is pinned in the engine's prefix cache, so any session of the
 * engine whose prompt starts with this exact history restores the state
 * instead of evaluating it (exactly: the whole state or nothing).
 *
 * @param[in]  session  the session; it must not be running a request
 * @param[out] out_mark receives the mark's id (> 0), valid for this session (and its forks)
 * @retval STRATA_OK                      marked
 * @retval STRATA_ERR_INVALID_ARGUMENT    a NULL pointer
 * @retval STRATA_ERR_FAILED_PRECONDITION the session is running a request or failed earlier
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @retval STRATA_ERR_RESOURCE_EXHAUSTED the model has no room for another state copy (the GPU state pool is full)
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_mark(strata_session *session, uint64_t *out_mark);

/**
 * @brief Returns the session to a mark: history, model state, logits and the conversation's messages.
 *
 * Marks made after @p mark stay valid (the session may move forward to them again).
 * @param[in] session the session; it must not be running a request
 * @param[in] mark    an id from strata_session_mark() on this session (or the session it was forked from)
 * @retval STRATA_OK                      restored
 * @retval STRATA_ERR_INVALID_ARGUMENT    @p session is NULL
 * @retval STRATA_ERR_NOT_FOUND           no such mark (never made, or released)
 * @retval STRATA_ERR_FAILED_PRECONDITION the session is running a request or failed earlier
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @retval STRATA_ERR_RESOURCE_EXHAUSTED the model has no room for another state copy (the GPU state pool is full)
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_rollback(strata_session *session, uint64_t mark);

/**
 * @brief Forgets a mark; its prefix-cache entry is no longer pinned.
 *
 * strata_session_reset() and strata_session_destroy() forget every mark.
 * @param[in] session the session; it must not be running a request
 * @param[in] mark    an id from strata_session_mark()
 * @retval STRATA_OK                      released
 * @retval STRATA_ERR_INVALID_ARGUMENT    @p session is NULL
 * @retval STRATA_ERR_NOT_FOUND           no such mark
 * @retval STRATA_ERR_FAILED_PRECONDITION the session is running a request
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_release_mark(strata_session *session, uint64_t mark);

/**
 * @brief Saves the session to a file: history, logits, model state, marks, conversation and tools.
 *
 * The file is self-describing and checksummed (SHA-256): it records the
 * model's fingerprint (architecture, vocabulary, a digest of config.json and
 * the weights, the layout of the state) and loads only into a model with the
 * same. It is written to a temporary file beside @p path, flushed to disk and
 * renamed over @p path, so @p path holds the old file or the whole new one,
 * never a part. Tool callbacks are not saved (see strata_session_load()). A
 * generated token the model has not consumed yet stays pending in the file.
 *
 * @param[in] session the session; it must not be running a request
 * @param[in] path    the file to write (NUL-terminated, replaced if it exists)
 * @retval STRATA_OK                      saved
 * @retval STRATA_ERR_INVALID_ARGUMENT    a NULL pointer
 * @retval STRATA_ERR_FAILED_PRECONDITION the session is running a request or failed earlier
 * @retval STRATA_ERR_UNSUPPORTED         the model's states cannot be saved (a model on CUDA: not yet)
 * @retval STRATA_ERR_NOT_FOUND           the directory of @p path does not exist
 * @retval STRATA_ERR_PERMISSION_DENIED   @p path cannot be written
 * @retval STRATA_ERR_RESOURCE_EXHAUSTED  the disk is full, or no room for a copy of the state
 * @retval STRATA_ERR_OUT_OF_MEMORY       allocation failed
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_save(strata_session *session, const char *path);

/**
 * @brief Saves the session into a caller's buffer, in the format of strata_session_save().
 *
 * Pass @p buffer = NULL (and @p capacity 0) to ask for the size; the size
 * stays the same while the session is not changed.
 *
 * @param[in]  session  the session; it must not be running a request
 * @param[out] buffer   @p capacity bytes, or NULL for a size query
 * @param[in]  capacity bytes @p buffer can hold
 * @param[out] out_size receives the saved size (always, also on ::STRATA_ERR_OUT_OF_RANGE)
 * @retval STRATA_OK                      saved (or answered the size query)
 * @retval STRATA_ERR_INVALID_ARGUMENT    @p session or @p out_size is NULL, or @p buffer is NULL with @p capacity > 0
 * @retval STRATA_ERR_OUT_OF_RANGE        @p capacity is smaller than the saved size; nothing copied
 * @retval STRATA_ERR_FAILED_PRECONDITION the session is running a request or failed earlier
 * @retval STRATA_ERR_UNSUPPORTED         the model's states cannot be saved
 * @retval STRATA_ERR_OUT_OF_MEMORY       allocation failed
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_save_to_buffer(strata_session *session, void *buffer, size_t capacity,
                                                       size_t *out_size);

/**
 * @brief Makes a session from a file written by strata_session_save().
 *
 * The new session continues exactly as the saved one would have: the same
 * history, logits, state, marks (pinned in this engine's prefix cache again),
 * conversation messages and tools. Tools come back without callbacks:
 * strata_session_add_tool() with the same name, description and parameters
 * attaches one. The file is refused, and nothing is created, when its
 * checksum, its format version or its model fingerprint does not match; the
 * error message (strata_last_error_message()) names the offset or the field
 * that differs.
 *
 * @param[in]  model       the model to run the session on; it must be the one the session was saved from
 *                         (the same weights, config and device kind)
 * @param[in]  path        the file (NUL-terminated)
 * @param[in]  params      NULL, or parameters: max_context_tokens 0 keeps the saved context size;
 *                         another value must hold the saved history
 * @param[out] out_session receives the session, owned by the caller (release with strata_session_destroy());
 *                         NULL on failure
 * @retval STRATA_OK                      loaded
 * @retval STRATA_ERR_INVALID_ARGUMENT    a NULL pointer, or bad @p params
 * @retval STRATA_ERR_NOT_FOUND           @p path does not exist
 * @retval STRATA_ERR_DATA_LOSS           the file is not a session, is truncated or corrupted
 * @retval STRATA_ERR_FAILED_PRECONDITION the file was saved from another model or format version, or holds
 *                                        a conversation and @p model has no tokenizer
 * @retval STRATA_ERR_OUT_OF_RANGE        the saved history does not fit max_context_tokens
 * @retval STRATA_ERR_UNSUPPORTED         the model's states cannot be loaded (a model on CUDA: not yet)
 * @retval STRATA_ERR_RESOURCE_EXHAUSTED  no room for the state
 * @retval STRATA_ERR_OUT_OF_MEMORY       allocation failed
 * @retval STRATA_ERR_MISUSE              @p model was destroyed or is not a model
 * @par Thread safety: safe from any thread; the new session is independent.
 * @since 0.1
 */
STRATA_API strata_status strata_session_load(strata_model *model, const char *path,
                                             const strata_session_params *params, strata_session **out_session);

/**
 * @brief Makes a session from the bytes strata_session_save_to_buffer() wrote.
 *
 * As strata_session_load(), reading @p size bytes at @p buffer (borrowed for the call).
 * @param[in]  model       the model the session was saved from
 * @param[in]  buffer      the saved bytes
 * @param[in]  size        their count
 * @param[in]  params      NULL, or parameters (see strata_session_load())
 * @param[out] out_session receives the session, owned by the caller; NULL on failure
 * @retval STRATA_OK                      loaded
 * @retval STRATA_ERR_INVALID_ARGUMENT    a NULL pointer, or bad @p params
 * @retval STRATA_ERR_DATA_LOSS           the bytes are not a session, are truncated or corrupted
 * @retval STRATA_ERR_FAILED_PRECONDITION saved from another model or format version, or a conversation for
 *                                        a model without tokenizer
 * @retval STRATA_ERR_OUT_OF_RANGE        the saved history does not fit max_context_tokens
 * @retval STRATA_ERR_UNSUPPORTED         the model's states cannot be loaded (a model on CUDA: not yet)
 * @retval STRATA_ERR_RESOURCE_EXHAUSTED  no room for the state
 * @retval STRATA_ERR_OUT_OF_MEMORY       allocation failed
 * @retval STRATA_ERR_MISUSE              @p model was destroyed or is not a model
 * @par Thread safety: safe from any thread; the new session is independent.
 * @since 0.1
 */
STRATA_API strata_status strata_session_load_from_buffer(strata_model *model, const void *buffer, size_t size,
                                                         const strata_session_params *params,
                                                         strata_session **out_session);

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
  /** Scheduling priority: higher is admitted, batched and given prefill budget first, and preempted last.
   *  Default 0. @since 0.1 */
  int32_t priority;
  /** Milliseconds after submission by which the request must finish; when it passes first, the request
   *  ends with ::STRATA_FINISH_DEADLINE and ::STRATA_ERR_DEADLINE_EXCEEDED. 0 (default): none. @since 0.1 */
  int64_t deadline_ms;
  /** The request ends with ::STRATA_FINISH_CONTEXT_FULL when the session's history reaches this many
   *  tokens. 0 (default): the session's max_context_tokens. @since 0.1 */
  int64_t max_context_tokens;
} strata_request_params;

/**
 * @brief Fills the caller's @p params with the defaults (greedy, 128 tokens, stop at EOS) and sets its struct_size.
 *
 * Call it through the strata_request_params_init() macro, which passes `sizeof(*params)`.
 * The library writes at most @p struct_size bytes: the fields of the
 * caller's layout, never past it.
 *
 * @param[out] params       the struct to fill
 * @param[in]  struct_size bytes of the caller's struct (its `sizeof`)
 * @retval STRATA_OK                   filled; struct_size = min(@p struct_size, this library's size)
 * @retval STRATA_ERR_INVALID_ARGUMENT @p params is NULL, or @p struct_size is smaller than the first released
 *                                     layout (nothing written)
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_request_params_init_sized(strata_request_params *params, size_t struct_size);
/** @brief Fills @p p (a `strata_request_params *`) with the defaults; see strata_request_params_init_sized(). */
#define strata_request_params_init(p) strata_request_params_init_sized((p), sizeof(*(p)))

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
 * @retval STRATA_ERR_RESOURCE_EXHAUSTED  the request's longest state (history, prompt and max_tokens, at most the
 *                                        context) exceeds strata_engine_params::memory_budget_bytes on its own
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
STRATA_API const char *strata_request_error_message(strata_request *request);

/**
 * @brief Releases a request; cancels it first if it is still running.
 *
 * A running request is cancelled, and the call returns once the scheduler
 * has let go of it (within one scheduling iteration): its session is then
 * idle, so the host may submit on it, fork it or destroy it at once. No event
 * of the request is returned by strata_engine_poll_event() afterwards (events
 * already returned keep the dangling handle: do not use it). Must not be
 * called from a log or metrics callback (those run on the scheduler thread).
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

/* ------------------------------------------------------------------------- */
/**
 * @defgroup strata_tokenizer Tokenizer
 * @brief Text to token ids and back, with the tokenizer files of a model directory.
 *
 * A tokenizer reads `tokenizer.json` (Hugging Face) or a tiktoken rank file
 * (`tiktoken.model`, `*.tiktoken`) plus `tokenizer_config.json`. A directory
 * with only these files is enough: no weights are needed. A tokenizer is
 * immutable and thread-safe.
 * @{
 */

/** @brief A tokenizer (opaque). Made by strata_tokenizer_open() or strata_model_open_tokenizer(),
 *  released by strata_tokenizer_destroy(). */
typedef struct strata_tokenizer strata_tokenizer;

/** Pass as a string length to mean "up to the terminating NUL". */
#define STRATA_NUL_TERMINATED ((size_t)-1)

/**
 * @brief Loads the tokenizer (and chat template, when present) of a directory.
 * @param[in]  dir           NUL-terminated UTF-8 path of the directory
 * @param[out] out_tokenizer receives the tokenizer, owned by the caller (release with
 *                           strata_tokenizer_destroy()); NULL on failure
 * @retval STRATA_OK                   loaded
 * @retval STRATA_ERR_INVALID_ARGUMENT NULL pointer, or a malformed tokenizer file (the message names the file and field)
 * @retval STRATA_ERR_NOT_FOUND        the directory has no tokenizer.json, tiktoken.model or *.tiktoken
 * @retval STRATA_ERR_OUT_OF_MEMORY    allocation failed
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_tokenizer_open(const char *dir, strata_tokenizer **out_tokenizer);

/**
 * @brief The tokenizer of a loaded model (the files in its directory).
 *
 * strata_model_load() reads the tokenizer files when the directory has them;
 * a directory without them loads as a token-id-only model.
 *
 * @param[in]  model         the model
 * @param[out] out_tokenizer receives a new handle, owned by the caller (release with
 *                           strata_tokenizer_destroy(); it may outlive @p model); NULL on failure
 * @retval STRATA_OK                   stored
 * @retval STRATA_ERR_INVALID_ARGUMENT NULL pointer
 * @retval STRATA_ERR_NOT_FOUND        the model directory has no tokenizer files
 * @retval STRATA_ERR_MISUSE           @p model was destroyed or is not a model
 * @retval other                       the tokenizer files failed to load (the message says why)
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_model_open_tokenizer(strata_model *model, strata_tokenizer **out_tokenizer);

/**
 * @brief Releases a tokenizer handle.
 * @param[in] tokenizer the tokenizer; invalid after ::STRATA_OK
 * @retval STRATA_OK                   released
 * @retval STRATA_ERR_INVALID_ARGUMENT @p tokenizer is NULL
 * @retval STRATA_ERR_MISUSE           @p tokenizer was already destroyed or is not a tokenizer
 * @par Thread safety: no other call may use @p tokenizer concurrently.
 * @since 0.1
 */
STRATA_API strata_status strata_tokenizer_destroy(strata_tokenizer *tokenizer);

/**
 * @brief Token ids of a text, exactly as the Hugging Face `tokenizers` library encodes it.
 *
 * Call with @p tokens = NULL to learn the count, then with a buffer.
 *
 * @param[in]  tokenizer          the tokenizer
 * @param[in]  text               UTF-8 text; may be NULL when @p text_len is 0
 * @param[in]  text_len           bytes of @p text, or ::STRATA_NUL_TERMINATED
 * @param[in]  add_special_tokens true: add BOS/EOS as tokenizer_config.json asks; false: the text's tokens only.
 *                                Special-token literals in the text (e.g. "<|im_start|>") are recognised either way.
 * @param[out] tokens             buffer of @p capacity ids, or NULL for a count query
 * @param[in]  capacity           ids @p tokens can hold
 * @param[out] out_count          receives the number of ids (always, also on ::STRATA_ERR_OUT_OF_RANGE)
 * @retval STRATA_OK                   encoded (or answered the count query)
 * @retval STRATA_ERR_INVALID_ARGUMENT NULL @p tokenizer or @p out_count, NULL @p text with a nonzero length, a
 *                                     length of 2^31 or more, @p text that is not UTF-8 (the message gives the
 *                                     byte offset), or a pre-tokenizer pattern that exceeds the regex engine's
 *                                     match limit on this text
 * @retval STRATA_ERR_OUT_OF_RANGE     @p capacity is smaller than the count; nothing written
 * @retval STRATA_ERR_MISUSE           @p tokenizer was destroyed or is not a tokenizer
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_tokenizer_encode(const strata_tokenizer *tokenizer, const char *text, size_t text_len,
                                                 bool add_special_tokens, int32_t *tokens, size_t capacity,
                                                 size_t *out_count);

/**
 * @brief Text of token ids, exactly as the Hugging Face `tokenizers` library decodes it.
 *
 * Writes the bytes followed by a NUL. Call with @p text = NULL to learn the
 * length, then with a buffer of at least length + 1 bytes.
 *
 * @param[in]  tokenizer           the tokenizer
 * @param[in]  tokens              @p num_tokens ids; may be NULL when @p num_tokens is 0
 * @param[in]  num_tokens          number of ids
 * @param[in]  skip_special_tokens leave special tokens out of the text
 * @param[out] text                buffer of @p capacity bytes, or NULL for a length query
 * @param[in]  capacity            bytes @p text can hold, including the NUL
 * @param[out] out_len             receives the text's length in bytes, without the NUL (always, also on
 *                                 ::STRATA_ERR_OUT_OF_RANGE)
 * @retval STRATA_OK                   decoded (or answered the length query)
 * @retval STRATA_ERR_INVALID_ARGUMENT NULL @p tokenizer or @p out_len, NULL @p tokens with a nonzero count
 * @retval STRATA_ERR_OUT_OF_RANGE     an id is outside the vocabulary (then *out_len is 0), or
 *                                     @p capacity < length + 1 (nothing written)
 * @retval STRATA_ERR_MISUSE           @p tokenizer was destroyed or is not a tokenizer
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_tokenizer_decode(const strata_tokenizer *tokenizer, const int32_t *tokens,
                                                 size_t num_tokens, bool skip_special_tokens, char *text,
                                                 size_t capacity, size_t *out_len);

/**
 * @brief Size of the tokenizer's vocabulary, added tokens included.
 * @param[in]  tokenizer      the tokenizer
 * @param[out] out_vocab_size receives the size; valid ids are [0, size)
 * @retval STRATA_OK                   stored
 * @retval STRATA_ERR_INVALID_ARGUMENT NULL pointer
 * @retval STRATA_ERR_MISUSE           @p tokenizer was destroyed or is not a tokenizer
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_tokenizer_get_vocab_size(const strata_tokenizer *tokenizer, int32_t *out_vocab_size);

/**
 * @brief Whether the tokenizer's directory has a chat template (`chat_template` in tokenizer_config.json, or
 *        chat_template.jinja), i.e. whether strata_tokenizer_render_chat() and the chat functions of sessions on
 *        its model can render conversations.
 * @param[in]  tokenizer the tokenizer
 * @param[out] out_has   receives true when it has one
 * @retval STRATA_OK                   stored
 * @retval STRATA_ERR_INVALID_ARGUMENT NULL pointer
 * @retval STRATA_ERR_MISUSE           @p tokenizer was destroyed or is not a tokenizer
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_tokenizer_has_chat_template(const strata_tokenizer *tokenizer, bool *out_has);

/**
 * @brief The prompt the chat template renders for a conversation, byte for byte as transformers'
 *        `apply_chat_template(messages, tools=tools, add_generation_prompt=..., tokenize=False, **variables)`.
 *
 * For hosts that keep conversations themselves, and for showing or checking
 * what a model is given. The directory's special-token variables (bos_token,
 * eos_token, ...) are set unless the conversation sets them. Writes the text
 * followed by a NUL; call with @p text = NULL to learn the length (each call
 * renders the template again).
 *
 * @param[in]  tokenizer         the tokenizer
 * @param[in]  conversation_json a JSON object: `messages` (an array of message objects as the template reads
 *                               them: role, content, tool_calls, ...), optional `tools`, optional
 *                               `add_generation_prompt` (default false) and any other template variable (e.g.
 *                               `enable_thinking`). Object keys keep the order written (templates print tool
 *                               schemas with `tojson`).
 * @param[in]  conversation_len  bytes of @p conversation_json, or ::STRATA_NUL_TERMINATED
 * @param[out] text              buffer of @p capacity bytes, or NULL for a length query
 * @param[in]  capacity          bytes @p text can hold, including the NUL
 * @param[out] out_len           receives the prompt's length in bytes, without the NUL (always, also on
 *                               ::STRATA_ERR_OUT_OF_RANGE)
 * @retval STRATA_OK                      rendered (or answered the length query)
 * @retval STRATA_ERR_INVALID_ARGUMENT    NULL @p tokenizer, @p conversation_json or @p out_len; JSON that is
 *                                        malformed, nested deeper than 256 levels, not an object or without a
 *                                        `messages` array; or the template
 *                                        failed (raise_exception or a runtime error: the message gives its line
 *                                        and column)
 * @retval STRATA_ERR_OUT_OF_RANGE        @p capacity < length + 1; nothing written
 * @retval STRATA_ERR_FAILED_PRECONDITION the directory has no chat template
 * @retval STRATA_ERR_MISUSE              @p tokenizer was destroyed or is not a tokenizer
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_tokenizer_render_chat(const strata_tokenizer *tokenizer, const char *conversation_json,
                                                      size_t conversation_len, char *text, size_t capacity,
                                                      size_t *out_len);

/** @} */

/* ------------------------------------------------------------------------- */
/**
 * @defgroup strata_chat Chat and tools
 * @brief Conversations rendered through the model's chat template, with host tools the model may call.
 *
 * A session on a model whose directory has a tokenizer and a chat template
 * (`chat_template` in tokenizer_config.json) keeps a conversation: a list of
 * messages. The tool loop:
 * 1. strata_session_add_tool() for each tool (name, description, JSON-schema
 *    parameters, and optionally a callback).
 * 2. strata_session_add_message() with the system and user messages.
 * 3. strata_session_submit_chat() (events) or strata_session_chat() (blocking,
 *    with callbacks). The conversation is rendered through the template with
 *    the tools, tokenized, and only the tokens the session does not hold yet
 *    are evaluated; then the model generates an assistant message, streamed as
 *    ::STRATA_EVENT_TEXT events.
 * 4. Each tool call the model writes (in the template's own syntax: Qwen/Hermes
 *    `<tool_call>`, DeepSeek, Kimi K2) becomes a ::STRATA_EVENT_TOOL_CALL event
 *    with (id, name, JSON arguments); strata_session_chat() calls the tool's
 *    callback instead. When the message ends and every call is answered with
 *    strata_request_submit_tool_result(), the answers are appended as tool
 *    messages and generation continues in the same request.
 * 5. The request finishes with ::STRATA_EVENT_FINISHED; the assistant messages
 *    and tool messages stay in the conversation for the next turn.
 *
 * @par Continuing without re-processing
 * Each round renders the whole conversation and compares its tokens with the
 * session's history. When the history is a prefix (the usual case: the model's
 * own tokens followed by the template's continuation), only the new suffix is
 * evaluated. When the template renders an earlier turn differently (e.g.
 * Qwen3 drops the reasoning of earlier turns, or the model's tokens differ from
 * how the template re-tokenizes its message), the session restores the state
 * it saved where the current turn's generation began and evaluates from there;
 * if the difference lies before that point it re-evaluates from the start. The
 * result is always the rendered conversation, exactly.
 * @{
 */

/** @brief Author of a chat message (one of the `STRATA_ROLE_*` values). */
typedef int32_t strata_role;
/** Instructions for the model. */
#define STRATA_ROLE_SYSTEM 0
/** The person the model talks to. */
#define STRATA_ROLE_USER 1
/** The model. */
#define STRATA_ROLE_ASSISTANT 2
/** A tool's result (strata_chat_message::tool_call_id names the call it answers). */
#define STRATA_ROLE_TOOL 3

/** @brief One message for strata_session_add_message(). Fill with strata_chat_message_init(). */
typedef struct strata_chat_message {
  /** sizeof(strata_chat_message); set by strata_chat_message_init(). */
  uint32_t struct_size;
  /** Who wrote it; default ::STRATA_ROLE_USER. */
  strata_role role;
  /** UTF-8 text; NULL (default) is the empty text. */
  const char *content;
  /** Bytes of content, or ::STRATA_NUL_TERMINATED (default). */
  size_t content_len;
  /** Assistant only: the model's reasoning, rendered where the template puts it; NULL (default): none. */
  const char *reasoning_content;
  /** Bytes of reasoning_content, or ::STRATA_NUL_TERMINATED (default). */
  size_t reasoning_content_len;
  /** Tool only: the id of the call this result answers (NUL-terminated); NULL (default): none. */
  const char *tool_call_id;
  /** Tool only: the tool's name (NUL-terminated); NULL (default): none. A tool message needs tool_call_id or name. */
  const char *name;
  /** Assistant only: the calls it made, as a NUL-terminated JSON array in the OpenAI form
   *  `[{"id": ..., "type": "function", "function": {"name": ..., "arguments": {...}}}]`, nested at most 256
   *  levels; NULL (default): none. */
  const char *tool_calls_json;
} strata_chat_message;

/**
 * @brief Fills the caller's @p message with the defaults (an empty user message) and sets its struct_size.
 *
 * Call it through the strata_chat_message_init() macro, which passes `sizeof(*message)`.
 * The library writes at most @p struct_size bytes: the fields of the
 * caller's layout, never past it.
 *
 * @param[out] message       the struct to fill
 * @param[in]  struct_size bytes of the caller's struct (its `sizeof`)
 * @retval STRATA_OK                   filled; struct_size = min(@p struct_size, this library's size)
 * @retval STRATA_ERR_INVALID_ARGUMENT @p message is NULL, or @p struct_size is smaller than the first released
 *                                     layout (nothing written)
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_chat_message_init_sized(strata_chat_message *message, size_t struct_size);
/** @brief Fills @p p (a `strata_chat_message *`) with the defaults; see strata_chat_message_init_sized(). */
#define strata_chat_message_init(p) strata_chat_message_init_sized((p), sizeof(*(p)))

/**
 * @brief Appends a message to the session's conversation (copied; nothing is evaluated yet).
 * @param[in] session the session
 * @param[in] message the message; struct_size must be set
 * @retval STRATA_OK                      appended
 * @retval STRATA_ERR_INVALID_ARGUMENT    NULL pointer, bad struct_size, unknown role, a string that is not UTF-8 or
 *                                        NULL with a nonzero length, a tool message without tool_call_id and
 *                                        name, or malformed tool_calls_json
 * @retval STRATA_ERR_FAILED_PRECONDITION the model directory has no tokenizer, or the session is running a request
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_add_message(strata_session *session, const strata_chat_message *message);

/**
 * @brief Copies the session's conversation as JSON: the messages array in the chat-template form.
 *
 * Assistant messages written by the model carry `content` (tool-call markup
 * removed) and `tool_calls`; results appear as `{"role": "tool", ...}`.
 *
 * @param[in]  session  the session
 * @param[out] json     buffer of @p capacity bytes (the JSON and a NUL), or NULL for a length query
 * @param[in]  capacity bytes @p json can hold
 * @param[out] out_len  receives the JSON's length without the NUL (always, also on ::STRATA_ERR_OUT_OF_RANGE)
 * @retval STRATA_OK                      copied (or answered the length query)
 * @retval STRATA_ERR_INVALID_ARGUMENT    NULL @p session or @p out_len
 * @retval STRATA_ERR_OUT_OF_RANGE        @p capacity < length + 1; nothing written
 * @retval STRATA_ERR_FAILED_PRECONDITION the model directory has no tokenizer, or the session is running a request
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_get_conversation(strata_session *session, char *json, size_t capacity,
                                                         size_t *out_len);

/**
 * @brief Runs a host tool for strata_session_chat().
 *
 * Answer with strata_request_submit_tool_result(@p request, call->tool_call_id,
 * ...) before returning. Returning without an answer answers for you: with an
 * empty result when the return value is 0, and with
 * `{"error":"tool 'NAME' failed with code N"}` when it is nonzero, so the model
 * learns of the failure and the conversation goes on. To end the request
 * instead, call strata_request_cancel(@p request).
 *
 * @param request   the running request; borrowed, valid during the call
 * @param call      a ::STRATA_EVENT_TOOL_CALL event (id, name, JSON arguments); valid during the call
 * @param user_data strata_tool::user_data
 * @return 0 on success, a nonzero host-defined code on failure
 *
 * Runs on the thread that called strata_session_chat(), never on an engine
 * thread. It must not call other functions on the same session.
 */
typedef int32_t (*strata_tool_callback)(strata_request *request, const strata_event *call, void *user_data);

/** @brief A host tool for strata_session_add_tool(). Fill with strata_tool_init(). */
typedef struct strata_tool {
  /** sizeof(strata_tool); set by strata_tool_init(). */
  uint32_t struct_size;
  /** Name the model calls it by (NUL-terminated, non-empty, unique in the session). Required; default NULL. */
  const char *name;
  /** What it does, for the model (NUL-terminated); NULL (default): "". */
  const char *description;
  /** JSON schema of the arguments, a NUL-terminated JSON object nested at most 256 levels; NULL (default):
   *  `{"type":"object","properties":{}}`. Key order is kept as written (templates print it). */
  const char *parameters_json;
  /** Called by strata_session_chat() when the model calls the tool; NULL (default): strata_session_chat()
   *  declines such calls (the request ends with ::STRATA_FINISH_TOOL_CALLS). Requests made with
   *  strata_session_submit_chat() deliver ::STRATA_EVENT_TOOL_CALL events instead of calling it. */
  strata_tool_callback callback;
  /** Passed to callback unchanged; default NULL. */
  void *user_data;
} strata_tool;

/**
 * @brief Fills the caller's @p tool with the defaults and sets its struct_size.
 *
 * Call it through the strata_tool_init() macro, which passes `sizeof(*tool)`.
 * The library writes at most @p struct_size bytes: the fields of the
 * caller's layout, never past it.
 *
 * @param[out] tool       the struct to fill
 * @param[in]  struct_size bytes of the caller's struct (its `sizeof`)
 * @retval STRATA_OK                   filled; struct_size = min(@p struct_size, this library's size)
 * @retval STRATA_ERR_INVALID_ARGUMENT @p tool is NULL, or @p struct_size is smaller than the first released
 *                                     layout (nothing written)
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_tool_init_sized(strata_tool *tool, size_t struct_size);
/** @brief Fills @p p (a `strata_tool *`) with the defaults; see strata_tool_init_sized(). */
#define strata_tool_init(p) strata_tool_init_sized((p), sizeof(*(p)))

/**
 * @brief Registers a tool on the session; the template shows it to the model as `tools`.
 * @param[in] session the session
 * @param[in] tool    the tool (strings copied); struct_size must be set
 * @retval STRATA_OK                      registered
 * @retval STRATA_ERR_INVALID_ARGUMENT    NULL pointer, bad struct_size, empty name, name or description not UTF-8,
 *                                        parameters_json not a JSON object
 * @retval STRATA_ERR_ALREADY_EXISTS      a tool of that name is registered
 * @retval STRATA_ERR_FAILED_PRECONDITION the model directory has no tokenizer, or the session is running a request
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_add_tool(strata_session *session, const strata_tool *tool);

/**
 * @brief Unregisters every tool of the session (the messages stay).
 * @param[in] session the session
 * @retval STRATA_OK                      cleared
 * @retval STRATA_ERR_INVALID_ARGUMENT    @p session is NULL
 * @retval STRATA_ERR_FAILED_PRECONDITION the model directory has no tokenizer, or the session is running a request
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_clear_tools(strata_session *session);

/**
 * @brief Receives each event of strata_session_chat() (TEXT, TOOL_CALL, TOOL_ERROR; not FINISHED).
 * @param request   the running request; borrowed, valid during the call
 * @param event     the event; its strings are valid during the call
 * @param user_data strata_chat_params::user_data
 * @return 0 to continue, nonzero to stop (the request then ends with ::STRATA_FINISH_CALLBACK and ::STRATA_OK)
 *
 * Runs on the thread that called strata_session_chat(). For a TOOL_CALL event
 * it runs before the tool's callback. It must not call other functions on the
 * same session.
 */
typedef int (*strata_event_callback)(strata_request *request, const strata_event *event, void *user_data);

/** @brief Chat options of strata_session_submit_chat() and strata_session_chat(). Fill with strata_chat_params_init(). */
typedef struct strata_chat_params {
  /** sizeof(strata_chat_params); set by strata_chat_params_init(). */
  uint32_t struct_size;
  /** NUL-terminated strings that end the request when the text reaches them (also across tokens); the stop
   *  string is not part of the text. Copied. May be NULL when num_stop_strings is 0. Default NULL. */
  const char *const *stop_strings;
  /** Number of entries in stop_strings; default 0. */
  size_t num_stop_strings;
  /** Rounds of tool results per request; a message with tool calls beyond it ends the request with
   *  ::STRATA_FINISH_TOOL_CALLS. 0: every tool call ends the request. Default 8. Range [0, 1000]. */
  int32_t max_tool_rounds;
  /** Leave special tokens out of the TEXT events; default false. */
  bool skip_special_tokens;
  /** Extra template variables as a NUL-terminated JSON object nested at most 256 levels, e.g.
   *  `{"enable_thinking": false}`; NULL (default): none. */
  const char *template_variables_json;
  /** strata_session_chat() only: receives each event; NULL (default): none. */
  strata_event_callback event_callback;
  /** Passed to event_callback unchanged; default NULL. */
  void *user_data;
} strata_chat_params;

/**
 * @brief Fills the caller's @p params with the defaults and sets its struct_size.
 *
 * Call it through the strata_chat_params_init() macro, which passes `sizeof(*params)`.
 * The library writes at most @p struct_size bytes: the fields of the
 * caller's layout, never past it.
 *
 * @param[out] params       the struct to fill
 * @param[in]  struct_size bytes of the caller's struct (its `sizeof`)
 * @retval STRATA_OK                   filled; struct_size = min(@p struct_size, this library's size)
 * @retval STRATA_ERR_INVALID_ARGUMENT @p params is NULL, or @p struct_size is smaller than the first released
 *                                     layout (nothing written)
 * @par Thread safety: safe from any thread.
 * @since 0.1
 */
STRATA_API strata_status strata_chat_params_init_sized(strata_chat_params *params, size_t struct_size);
/** @brief Fills @p p (a `strata_chat_params *`) with the defaults; see strata_chat_params_init_sized(). */
#define strata_chat_params_init(p) strata_chat_params_init_sized((p), sizeof(*(p)))

/**
 * @brief Starts an assistant turn on the conversation; returns immediately.
 *
 * Renders the conversation with the generation prompt, evaluates what the
 * session does not hold yet, and generates on the engine's scheduler thread.
 * Events (strata_engine_poll_event()): TEXT, TOOL_CALL, TOOL_ERROR, then
 * FINISHED. Generation stops at the model's EOS, the template's end-of-turn
 * token (e.g. `<|im_end|>`), @p params stop tokens, a stop string, or
 * max_tokens (counted over the whole request). After a message with tool
 * calls the request waits, without using the scheduler, until each TOOL_CALL
 * is answered with strata_request_submit_tool_result(); tool callbacks are not
 * called. Malformed calls and calls of unknown tools are TOOL_ERROR events; an
 * unknown tool is answered with an error result automatically, so the model
 * can try again. Arguments are checked and the conversation is rendered before
 * anything is queued: on failure the session is unchanged.
 *
 * @param[in]  session     the session; it must not be running a request
 * @param[in]  params      sampling and length; may be NULL for defaults (token_callback is ignored)
 * @param[in]  chat        may be NULL for defaults; otherwise struct_size must be set
 * @param[out] out_request receives the request, owned by the caller (release with strata_request_destroy());
 *                         NULL on failure
 * @retval STRATA_OK                      submitted
 * @retval STRATA_ERR_INVALID_ARGUMENT    NULL pointer, bad struct_size, a value out of range, a stop string that is
 *                                        not UTF-8, malformed template_variables_json, or the template failed to
 *                                        render (the message gives its line and column)
 * @retval STRATA_ERR_OUT_OF_RANGE        the rendered conversation leaves no room in the context, or a stop token is
 *                                        outside the vocabulary
 * @retval STRATA_ERR_FAILED_PRECONDITION the model has no tokenizer or chat template, the session is running a
 *                                        request, or it needs strata_session_reset()
 * @retval STRATA_ERR_RESOURCE_EXHAUSTED  the rendered conversation plus max_tokens (at most the context) needs more
 *                                        state than strata_engine_params::memory_budget_bytes on its own
 * @retval STRATA_ERR_MISUSE              @p session was destroyed or is not a session
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_submit_chat(strata_session *session, const strata_request_params *params,
                                                    const strata_chat_params *chat, strata_request **out_request);

/**
 * @brief Runs an assistant turn on the calling thread's behalf, calling the tools' callbacks.
 *
 * strata_session_submit_chat() followed by polling this request's events on
 * the calling thread: each TEXT, TOOL_CALL and TOOL_ERROR event goes to
 * strata_chat_params::event_callback, and each TOOL_CALL to its tool's
 * strata_tool::callback (a tool without one declines the call: the request
 * ends with ::STRATA_FINISH_TOOL_CALLS). Both run on the calling thread. The
 * request handle exists only during the call.
 *
 * @param[in]  session           the session; it must not be running a request
 * @param[in]  params            as strata_session_submit_chat()
 * @param[in]  chat              as strata_session_submit_chat(); event_callback and user_data are used
 * @param[out] out_finish_reason receives why the turn ended; may be NULL
 * @retval STRATA_OK            finished: EOS or end of turn, stop token or string, max_tokens, a full context,
 *                              declined tool calls, or the event callback
 * @retval STRATA_ERR_CANCELLED strata_request_cancel() was called on the request
 * @retval other                the codes of strata_session_submit_chat(), or the error that ended the turn
 * @par Thread safety: one thread per session at a time.
 * @since 0.1
 */
STRATA_API strata_status strata_session_chat(strata_session *session, const strata_request_params *params,
                                             const strata_chat_params *chat, strata_finish_reason *out_finish_reason);

/**
 * @brief Answers a tool call of a chat request (or declines it).
 *
 * The result becomes a tool message (role "tool", tool_call_id, the tool's
 * name, @p content) rendered through the template once every call of the
 * message is answered; generation then continues. A call may be answered as
 * soon as its TOOL_CALL event arrives, also while the message is still being
 * generated.
 *
 * @param[in] request     a chat request
 * @param[in] call_id     NUL-terminated id from the TOOL_CALL event
 * @param[in] content     the result (usually JSON), copied; NULL declines the call: the request then ends with
 *                        ::STRATA_FINISH_TOOL_CALLS when its message is complete
 * @param[in] content_len bytes of @p content, or ::STRATA_NUL_TERMINATED
 * @retval STRATA_OK                      recorded
 * @retval STRATA_ERR_INVALID_ARGUMENT    @p request or @p call_id is NULL, or @p content is not UTF-8
 * @retval STRATA_ERR_NOT_FOUND           @p call_id is not a call of this request
 * @retval STRATA_ERR_ALREADY_EXISTS      the call was already answered or declined (also once its answer has
 *                                        been consumed and generation continues)
 * @retval STRATA_ERR_FAILED_PRECONDITION the request is not a chat request, or it has finished
 * @retval STRATA_ERR_MISUSE              @p request was destroyed or is not a request
 * @par Thread safety: safe from any thread, including a tool or event callback.
 * @since 0.1
 */
STRATA_API strata_status strata_request_submit_tool_result(strata_request *request, const char *call_id,
                                                           const char *content, size_t content_len);

/** @} */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_STRATA_H_ */
