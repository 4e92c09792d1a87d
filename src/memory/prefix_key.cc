#include "memory/prefix_key.h"

namespace strata {
namespace {

Sha256Digest Seed(const ModelFingerprint& m) {
  Sha256 h;
  h.Update("strata.prefix.v1");
  for (const std::string* s : {&m.architecture, &m.weights_digest, &m.state_layout}) {
    h.UpdateU64(s->size()).Update(*s);
  }
  return h.UpdateU64(static_cast<uint64_t>(m.vocab_size)).Finish();
}

std::span<const uint8_t> Bytes(std::span<const int32_t> ids) {
  return {reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * sizeof(int32_t)};
}

Sha256Digest Step(const Sha256Digest& prev, std::span<const int32_t> block) {
  return Sha256().Update(prev).Update(Bytes(block)).Finish();
}

}  // namespace

std::vector<Sha256Digest> BlockPrefixKeys(const ModelFingerprint& model,
                                          std::span<const int32_t> tokens) {
  std::vector<Sha256Digest> keys;
  Sha256Digest h = Seed(model);
  for (size_t at = 0; at + kPrefixKeyBlock <= tokens.size(); at += kPrefixKeyBlock) {
    h = Step(h, tokens.subspan(at, kPrefixKeyBlock));
    keys.push_back(h);
  }
  return keys;
}

Sha256Digest PrefixKeyFromBlocks(const ModelFingerprint& model, std::span<const Sha256Digest> blocks,
                                 std::span<const int32_t> tokens) {
  const size_t full = blocks.size() * kPrefixKeyBlock;
  const Sha256Digest h = blocks.empty() ? Seed(model) : blocks.back();
  if (full == tokens.size() && !blocks.empty()) return h;
  const std::span<const int32_t> rest = tokens.subspan(full);
  return Sha256().Update(h).UpdateU64(rest.size()).Update(Bytes(rest)).Finish();
}

Sha256Digest PrefixKey(const ModelFingerprint& model, std::span<const int32_t> tokens) {
  return PrefixKeyFromBlocks(model, BlockPrefixKeys(model, tokens), tokens);
}

}  // namespace strata
