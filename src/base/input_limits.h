// Limits on input from outside the library: files of a model directory,
// strings the host passes, text the model writes. Each one exists because
// the input would otherwise take the host down with the library:
//  - depth limits bound recursion, so that a host thread with a small stack
//    survives (hosts call in on threads of 256 KB or less; glibc's default
//    is 8 MB, musl's 128 KB);
//  - budgets bound the time and memory of a chat-template render, which runs
//    on the caller's thread before anything is queued.
// They are in one place so that the code, the error messages and the tests
// agree. Where a message names a limit, it prints the constant.
#ifndef STRATA_BASE_INPUT_LIMITS_H_
#define STRATA_BASE_INPUT_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace strata::limits {

// ---- JSON (base/bounded_json.h) ----

// Objects and arrays nested deeper are refused before a document exists:
// nlohmann parses iteratively, but copies, dumps and compares recursively,
// so a deep document must never be built. Tool schemas nest a few levels;
// 256 is far past any real one. Model files (config.json, safetensors
// headers) have their own stricter 64 (model/strict_json.h).
inline constexpr int kMaxJsonDepth = 256;

// ---- Chat templates: parsing (text/jinja/parser.cc) ----

// Nesting of a template's source: blocks inside blocks ({% if %}, {% for %},
// {% macro %}, ...), brackets, parentheses, call arguments and prefix
// operators, counted together. Real templates stay below 20.
inline constexpr int kMaxTemplateNesting = 64;
// Depth of one expression's tree: `a.b.c`, `x | f | g` and `1 + 2 + 3` are
// parsed in a loop but nest one level per step (long `~` chains are common).
inline constexpr int kMaxTemplateExprDepth = 128;
// Integer literals beyond int64 are a parse error (Python's are unbounded;
// no chat template spells one).

// ---- Chat templates: rendering (text/jinja/render_state.h) ----

// Nested evaluation: statements, expressions and macro calls together, so
// that recursion through macros is bounded by the same count as a deep
// template. A template that parses needs at most kMaxTemplateNesting +
// kMaxTemplateExprDepth outside macros; the rest is for recursive macros
// (schema walkers).
inline constexpr int kMaxRenderDepth = 384;
// Lists, dicts and namespaces nested in one value. A context built from
// JSON at kMaxJsonDepth is wrapped a few levels more (messages[i].tool_calls,
// tools[i].function.parameters), so this is twice that.
inline constexpr int kMaxTemplateValueDepth = 2 * kMaxJsonDepth;
// Work of one render: every statement, expression, loop iteration, element
// produced or compared and every 16 bytes of string produced is one step.
// A long real conversation takes well under a million.
inline constexpr int64_t kMaxRenderSteps = 10'000'000;
inline constexpr int64_t kRenderBytesPerStep = 16;
// How often (in steps) a render polls its cancellation callback.
inline constexpr int64_t kRenderCancelPollSteps = 4096;
// Bytes of the rendered prompt (about 8M tokens).
inline constexpr int64_t kMaxRenderOutputBytes = int64_t{32} << 20;
// Bytes of one string value, and items of one list or dict.
inline constexpr int64_t kMaxTemplateStringBytes = int64_t{32} << 20;
inline constexpr int64_t kMaxTemplateItems = 1'000'000;
// Memory a render holds at once in the strings, lists and dicts it made
// (the values it was given do not count).
inline constexpr int64_t kMaxRenderMemoryBytes = int64_t{256} << 20;

// ---- Vocabularies (model/config_bounds.h, text/) ----

// The largest vocabulary a config.json or a tokenizer file may declare: token
// ids must be below it. Id tables are dense, so an id is also an allocation
// (a tokenizer.json listing one token with id 2^31 - 1 would otherwise ask
// for 2^31 entries). The largest published vocabularies are about 262 K.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;
// The largest token id of a tokenizer.json (vocab, added tokens,
// post-processor), a tiktoken rank file or tokenizer_config.json's
// added_tokens_decoder (text/token_id_check.h).
inline constexpr int32_t kMaxTokenId = static_cast<int32_t>(kMaxVocabSize - 1);

// ---- Model files (model/) ----

// Decoder layers of a config.json (num_hidden_layers): the architecture
// parsers build a list per layer, so the count bounds their time and memory.
// Published models have at most a few hundred.
inline constexpr int64_t kMaxModelLayers = 4096;
// Any one size a config.json gives as a positive integer (hidden size,
// vocabulary, heads, head widths, ranks, FFN widths): the parsers and the
// shapes built from them multiply up to three, which must stay below 2^63.
// Published models stay below 2^18 in every one.
inline constexpr int64_t kMaxModelDimension = int64_t{1} << 20;

// ---- Stack (base/stack_guard.h) ----

// Recursive code stops, with an error, when fewer bytes than this remain on
// the calling thread's stack, whatever its depth counter says: frame sizes
// differ between builds (sanitizers make them several times larger), and the
// host may have used much of a small stack before calling in.
inline constexpr size_t kStackReserveBytes = 48 * 1024;

}  // namespace strata::limits

#endif  // STRATA_BASE_INPUT_LIMITS_H_
