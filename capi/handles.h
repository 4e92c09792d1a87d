// The C handles: each owns (or shares) one core object plus boundary state.
// A live handle carries its type's magic number; destroy sets it to a dead
// value and parks the shell in a bounded graveyard instead of freeing it, so a
// double destroy or a use after destroy reads valid memory and is reported as
// STRATA_ERR_MISUSE rather than being undefined behaviour.
#ifndef STRATA_CAPI_HANDLES_H_
#define STRATA_CAPI_HANDLES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/engine.h"
#include "engine/request.h"
#include "engine/session.h"
#include "model/model.h"
#include "strata/strata.h"
#include "text/text_model.h"

namespace strata::capi {

// Distinct per type, so a handle of the wrong type is caught too. ASCII tags
// make them readable in a debugger ("ENG1", ...).
inline constexpr uint32_t kEngineMagic = 0x31474E45u;   // "ENG1"
inline constexpr uint32_t kModelMagic = 0x314C444Du;    // "MDL1"
inline constexpr uint32_t kSessionMagic = 0x31535345u;  // "ESS1"
inline constexpr uint32_t kRequestMagic = 0x31515152u;  // "RQQ1"
inline constexpr uint32_t kTokenizerMagic = 0x314B4F54u;  // "TOK1"
inline constexpr uint32_t kDeadMagic = 0xDEADDEADu;

// Destroyed shells kept before the oldest is freed (all types together).
inline constexpr size_t kGraveyardSize = 4096;

// Parks `p` (magic already dead, core object released) in the graveyard.
void Bury(void* p, void (*deleter)(void*)) noexcept;

template <class H>
void BuryHandle(H* h) noexcept {
  Bury(h, [](void* p) { delete static_cast<H*>(p); });
}

}  // namespace strata::capi

// Every handle begins with its magic, so the check reads the same offset
// whatever type the caller passed.
struct strata_engine {
  std::atomic<uint32_t> magic{strata::capi::kEngineMagic};
  std::unique_ptr<strata::Engine> impl;
  // Live models, sessions and requests; the engine refuses to die before them.
  std::atomic<int64_t> num_models{0};
  std::atomic<int64_t> num_sessions{0};
  std::atomic<int64_t> num_requests{0};
};

struct strata_model {
  std::atomic<uint32_t> magic{strata::capi::kModelMagic};
  strata_engine* engine = nullptr;
  std::shared_ptr<const strata::Model> impl;  // sessions share it
  // The directory's tokenizer and chat template: NotFound when it has no
  // tokenizer files; another error when they failed to load (the model still
  // runs on token ids, and the text functions report this error).
  strata::StatusOr<std::shared_ptr<const strata::TextModel>> text{absl::NotFoundError("no tokenizer")};
};

struct strata_tokenizer {
  std::atomic<uint32_t> magic{strata::capi::kTokenizerMagic};
  std::shared_ptr<const strata::TextModel> impl;
};

struct strata_session {
  std::atomic<uint32_t> magic{strata::capi::kSessionMagic};
  strata_engine* engine = nullptr;
  std::unique_ptr<strata::Session> impl;
  // Set while strata_session_generate runs on it (destroying it then is misuse).
  std::atomic<bool> in_generate{false};
};

struct strata_request {
  std::atomic<uint32_t> magic{strata::capi::kRequestMagic};
  strata_engine* engine = nullptr;
  // Guards impl against a destroy racing with strata_request_cancel from another thread.
  std::mutex mu;
  std::shared_ptr<strata::Request> impl;
  std::string errmsg;          // returned by strata_request_error_message
  bool library_owned = false;  // made by strata_session_generate; the caller may not destroy it
};

#endif  // STRATA_CAPI_HANDLES_H_
