// Pre-tokenizers of tokenizer.json (Split, ByteLevel, Digits, Metaspace,
// Sequence): they cut a normalized segment into the pieces the model encodes
// one by one.
#ifndef STRATA_TEXT_PRETOKENIZER_H_
#define STRATA_TEXT_PRETOKENIZER_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "text/pretokenizer_regex.h"

namespace strata::text {

// Pieces as byte spans into `buf`. A step that must change text (a prefix
// space) appends the new piece text to `buf` and points its span there.
struct PieceList {
  std::string buf;
  std::vector<std::pair<uint32_t, uint32_t>> spans;  // [begin, end)
  // The piece that begins at the very start of the input text (the
  // reference's original offset 0), or -1. Metaspace's "first" prepend scheme
  // adds its replacement only there; steps that cut pieces keep it current.
  int32_t start_piece = -1;
  std::string_view Piece(size_t i) const {
    return std::string_view(buf).substr(spans[i].first, spans[i].second - spans[i].first);
  }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual Status Apply(PieceList* pieces) const = 0;
  // True when a ByteLevel step is part of this pre-tokenizer (the model then
  // works on bytes mapped through the byte-level alphabet).
  virtual bool UsesByteLevel() const { return false; }

  // `where` names the file and JSON path for error messages.
  static StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& j,
                                                          const std::string& where);
};

// Metaspace's prepend_scheme (pre-tokenizer and decoder).
enum class PrependScheme { kAlways, kFirst, kNever };
// "prepend_scheme" (default "always"), or the older "add_prefix_space" (false:
// "never"), as the reference reads them; `where` names the JSON path.
StatusOr<PrependScheme> ParsePrependScheme(const nlohmann::json& j, const std::string& where);

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits every piece by a regex's matches, as tokenizers' Split does.
class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  Status Apply(PieceList* pieces) const override;

 private:
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_PRETOKENIZER_H_
