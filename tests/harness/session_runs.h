// Engine-level runs the saved-session tests share on both devices: an
// engine, a greedy generation on a session, and what a session does next.
#ifndef STRATA_TESTS_HARNESS_SESSION_RUNS_H_
#define STRATA_TESTS_HARNESS_SESSION_RUNS_H_

#include <memory>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "engine/session.h"

namespace strata::parity {

// An engine of two compute threads; null (a test failure) when it fails.
std::unique_ptr<Engine> NewEngine();

// The greedy tokens of a request of `prompt` and `n` new tokens on `s`
// (EOS does not stop it).
std::vector<int32_t> GenerateGreedy(Engine& e, Session& s, std::span<const int32_t> prompt, int32_t n);

// What a session does next: a request of `more` and 9 new tokens, then the
// logits after the history and the history.
struct Continuation {
  std::vector<int32_t> generated;
  std::vector<float> logits;
  std::vector<int32_t> history;
};
Continuation Continue(Engine& e, Session& s, const std::vector<int32_t>& more);

// Saves a session of `model` after `cut` tokens of `prompt`, a mark and (with
// `generate`) 5 generated tokens; continues it with `more`, loads the saved
// bytes into `other` (a second load of the model) on another engine and
// expects the same continuation, bit for bit, and the same bytes saved again.
void ExpectSaveLoadContinuesExactly(std::shared_ptr<const Model> model,
                                    std::shared_ptr<const Model> other,
                                    const std::vector<int32_t>& prompt, int64_t cut, bool generate,
                                    const std::vector<int32_t>& more);

}  // namespace strata::parity

#endif  // STRATA_TESTS_HARNESS_SESSION_RUNS_H_
