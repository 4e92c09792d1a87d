// Incremental tool-call parsers (see tool_call_parser.h).
//
// One state machine serves all three families; they differ only in their
// markers and in how a call's header is spelled. The machine keeps the
// unconsumed input in `buf_` and advances `pos_` only on decisions that no
// later byte can change: a marker is matched only once all its bytes are in,
// text is emitted only up to the first place a marker could still start, and
// limits (header length, ...) are checked against positions in the stream,
// never against how much has arrived so far. That is what makes the events
// independent of chunking.
//
// Grammar (whitespace between the pieces is allowed and dropped):
//   Hermes:    text <tool_call> {"name": N, "arguments": A} </tool_call> text
//   DeepSeek:  text <｜tool▁calls▁begin｜> CALL* <｜tool▁calls▁end｜> text
//              CALL = <｜tool▁call▁begin｜>
//              function<｜tool▁sep｜>N\n```json\nA\n```<｜tool▁call▁end｜>  (V3)
//                   | <｜tool▁call▁begin｜> N<｜tool▁sep｜>A<｜tool▁call▁end｜> (V3.1)
//   Kimi K2:   text <|tool_calls_section_begin|> CALL* <|tool_calls_section_end|> text
//              CALL =
//              <|tool_call_begin|>functions.N:IDX<|tool_call_argument_begin|>A<|tool_call_end|>
// A malformed call becomes an error event carrying its raw markup; parsing
// resumes at the next marker that can end or start a call, so later calls in
// the same message still parse.
#include "text/tool_call_parser.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/bounded_json.h"

namespace strata {
namespace {

using Json = nlohmann::json;

// Tool names and headers longer than this are treated as garbage rather than
// waited for, so a model that never emits the separator cannot stall the stream.
constexpr size_t kMaxHeaderBytes = 256;
// Deeper nesting is rejected before nlohmann's parser sees it.
constexpr size_t kMaxJsonDepth = limits::kMaxJsonDepth;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string_view StripSpace(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Concatenation of std::string_view pieces (this Abseil's StrCat predates
// std::string_view interop).
template <typename... Parts>
std::string Cat(const Parts&... parts) {
  std::string out;
  (out.append(std::string_view(parts)), ...);
  return out;
}

enum class MatchKind { kNo, kPartial, kFull };

// Whether `lit` starts at buf[pos]. kPartial: the buffer ends inside a prefix
// of `lit` (undecided); at end of stream a partial match is a mismatch.
MatchKind MatchAt(std::string_view buf, size_t pos, std::string_view lit, bool eof) {
  const size_t n = std::min(buf.size() - pos, lit.size());
  if (buf.substr(pos, n) != lit.substr(0, n)) return MatchKind::kNo;
  if (n == lit.size()) return MatchKind::kFull;
  return eof ? MatchKind::kNo : MatchKind::kPartial;
}

struct Hit {
  MatchKind kind;
  size_t pos;    // marker start; buf.size() for kNo
  size_t which;  // index into the marker list for kFull
};

// Earliest position >= `from` where one of `markers` (all starting with '<')
// starts. kPartial stops at the first undecided position: nothing before it
// can be a marker start, so callers may resume the search there.
Hit FindFirst(std::string_view buf, size_t from, const std::vector<std::string_view>& markers,
              bool eof) {
  size_t i = from;
  while (i < buf.size()) {
    i = buf.find('<', i);
    if (i == std::string_view::npos) break;
    bool partial = false;
    size_t full = markers.size();
    for (size_t m = 0; m < markers.size(); ++m) {
      const MatchKind k = MatchAt(buf, i, markers[m], eof);
      if (k == MatchKind::kPartial) partial = true;
      if (k == MatchKind::kFull && full == markers.size()) full = m;
    }
    // A full match that is a prefix of a still-possible longer marker would
    // be undecided; none of our marker sets has such pairs, but waiting keeps
    // the rule simple and safe.
    if (partial) return {MatchKind::kPartial, i, 0};
    if (full < markers.size()) return {MatchKind::kFull, i, full};
    ++i;
  }
  return {MatchKind::kNo, buf.size(), 0};
}

// End of the longest prefix of s[from, to) that does not stop inside a UTF-8
// sequence (text events never carry half a character while more may come).
size_t CompleteUtf8End(std::string_view s, size_t from, size_t to) {
  for (size_t back = 1; back <= 3 && back <= to - from; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[to - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? to - back : to;
  }
  return to;
}

// Finds where a JSON object ends in a byte stream without parsing it: tracks
// strings, escapes and bracket nesting, and rejects bytes that cannot appear
// in JSON outside strings (notably '<', so a missing brace is noticed at the
// closing marker instead of swallowing the rest of the message). The complete
// text is validated by nlohmann::json afterwards.
class JsonObjectScanner {
 public:
  enum class State { kScanning, kDone, kError };

  void Reset() { *this = JsonObjectScanner(); }

  // Scans buf[*pos..]; *pos ends after the object's closing brace (kDone), at
  // the offending byte (kError), or at buf.size() (kScanning).
  State Scan(std::string_view buf, size_t* pos) {
    for (; *pos < buf.size(); ++*pos) {
      const unsigned char c = static_cast<unsigned char>(buf[*pos]);
      if (!started_) {
        if (IsSpace(static_cast<char>(c))) continue;
        if (c != '{') return Fail("expected a JSON object");
        started_ = true;
        start_ = *pos;
        stack_.push_back('}');
        continue;
      }
      if (in_string_) {
        if (escape_) {
          escape_ = false;
        } else if (c == '\\') {
          escape_ = true;
        } else if (c == '"') {
          in_string_ = false;
        } else if (c < 0x20) {
          return Fail("unescaped control character inside a JSON string");
        }
        continue;
      }
      switch (c) {
        case '"':
          in_string_ = true;
          break;
        case '{':
        case '[':
          if (stack_.size() >= kMaxJsonDepth) return Fail("JSON nested too deeply");
          stack_.push_back(c == '{' ? '}' : ']');
          break;
        case '}':
        case ']':
          if (stack_.back() != static_cast<char>(c)) return Fail("mismatched bracket in JSON");
          stack_.pop_back();
          if (stack_.empty()) {
            ++*pos;
            return State::kDone;
          }
          break;
        default:
          if (!IsBareJsonByte(c)) {
            return Fail(
                Cat("unexpected character '", std::string(1, static_cast<char>(c)), "' in JSON"));
          }
      }
    }
    return State::kScanning;
  }

  size_t start() const { return start_; }
  const std::string& error() const { return error_; }

 private:
  // Bytes of numbers, literals, separators and whitespace.
  static bool IsBareJsonByte(unsigned char c) {
    return IsSpace(static_cast<char>(c)) || c == ',' || c == ':' || c == '-' || c == '+' ||
           c == '.' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  }
  State Fail(std::string message) {
    error_ = std::move(message);
    return State::kError;
  }

  std::vector<char> stack_;  // expected closing brackets
  bool started_ = false;
  bool in_string_ = false;
  bool escape_ = false;
  size_t start_ = 0;
  std::string error_;
};

struct Markers {
  std::vector<std::string_view> openers;  // start a tool-call block in text
  // Hermes: the block's closer. Sections: their end markers.
  std::string_view hermes_close;
  std::vector<std::string_view> section_ends;
  std::string_view call_begin, call_end, sep;
};

Markers MarkersFor(ToolCallFamily family) {
  Markers m;
  switch (family) {
    case ToolCallFamily::kHermes:
      m.openers = {"<tool_call>"};
      m.hermes_close = "</tool_call>";
      break;
    case ToolCallFamily::kDeepSeek:
      m.openers = {"<｜tool▁calls▁begin｜>"};
      m.section_ends = {"<｜tool▁calls▁end｜>"};
      m.call_begin = "<｜tool▁call▁begin｜>";
      m.call_end = "<｜tool▁call▁end｜>";
      m.sep = "<｜tool▁sep｜>";
      break;
    case ToolCallFamily::kKimiK2:
      // Kimi's own parsers also accept the singular "tool_call_section" spelling.
      m.openers = {"<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"};
      m.section_ends = {"<|tool_calls_section_end|>", "<|tool_call_section_end|>"};
      m.call_begin = "<|tool_call_begin|>";
      m.call_end = "<|tool_call_end|>";
      m.sep = "<|tool_call_argument_begin|>";
      break;
  }
  return m;
}

class StreamingParser final : public ToolCallParser {
 public:
  StreamingParser(ToolCallFamily family, ToolCallParserOptions options)
      : family_(family), options_(std::move(options)), m_(MarkersFor(family)) {
    if (family_ == ToolCallFamily::kHermes) {
      recover_markers_ = {m_.hermes_close, m_.openers[0]};
    } else {
      recover_markers_ = {m_.call_end, m_.call_begin};
      header_markers_ = {m_.sep, m_.call_end, m_.call_begin};
      for (std::string_view e : m_.section_ends) {
        recover_markers_.push_back(e);
        header_markers_.push_back(e);
      }
    }
  }

  std::vector<ToolCallEvent> Feed(std::string_view chunk) override {
    buf_.append(chunk);
    while (Step()) {
    }
    Compact();
    return std::exchange(out_, {});
  }

  std::vector<ToolCallEvent> Finish() override {
    eof_ = true;
    while (Step()) {
    }
    if (state_ != State::kOutside) ReportUnterminated();
    buf_.clear();
    pos_ = scan_ = 0;
    state_ = State::kOutside;
    skip_space_ = false;
    eof_ = false;
    return std::exchange(out_, {});
  }

  ToolCallFamily family() const override { return family_; }

 private:
  enum class State {
    kOutside,      // user text
    kHermesBody,   // after <tool_call>: the {"name", "arguments"} object
    kHermesAfter,  // after that object: expecting </tool_call>
    kSectionIdle,  // inside a section, between calls
    kCallHeader,   // after call_begin: up to the separator
    kAfterSep,     // DeepSeek: V3.1 arguments or a V3 name follow
    kDsName,       // DeepSeek V3: the name line
    kDsFence,      // DeepSeek V3: ```json
    kArgs,         // the arguments object
    kAfterArgs,    // closing fence (V3) and call_end
    kRecover,      // skipping a malformed call to the next marker
  };

  bool Step() {
    // At the end of the stream with nothing left, an open block is reported
    // once by ReportUnterminated rather than by each state's expectation.
    if (eof_ && pos_ >= buf_.size() && state_ != State::kOutside && state_ != State::kRecover) {
      return false;
    }
    switch (state_) {
      case State::kOutside:
        return StepOutside();
      case State::kHermesBody:
      case State::kArgs: {
        const auto st = scanner_.Scan(buf_, &pos_);
        if (st == JsonObjectScanner::State::kScanning) return false;
        if (st == JsonObjectScanner::State::kError) {
          return StartRecover(Cat("malformed JSON in tool call: ", scanner_.error()));
        }
        json_start_ = scanner_.start();
        json_end_ = pos_;
        state_ = state_ == State::kHermesBody ? State::kHermesAfter : State::kAfterArgs;
        return true;
      }
      case State::kHermesAfter: {
        SkipSpace();
        const MatchKind k = MatchAt(buf_, pos_, m_.hermes_close, eof_);
        if (k == MatchKind::kPartial) return false;
        if (k == MatchKind::kNo) {
          return StartRecover(Cat("expected ", m_.hermes_close, " after the call's JSON"));
        }
        pos_ += m_.hermes_close.size();
        CompleteHermesCall();
        state_ = State::kOutside;
        skip_space_ = true;
        return true;
      }
      case State::kSectionIdle:
        return StepSectionIdle();
      case State::kCallHeader:
        return StepCallHeader();
      case State::kAfterSep: {
        SkipSpace();
        if (pos_ == buf_.size()) return false;
        if (buf_[pos_] == '{') {  // V3.1: the header was the name
          name_ = header_;
          fence_ = false;
          scanner_.Reset();
          state_ = State::kArgs;
        } else {  // V3: the header was the type; the name follows
          name_start_ = pos_;
          state_ = State::kDsName;
        }
        return true;
      }
      case State::kDsName: {
        const size_t nl = buf_.find('\n', name_start_);
        const size_t end = nl == std::string::npos ? buf_.size() : nl;
        if (end - name_start_ > kMaxHeaderBytes) return StartRecover("tool name too long");
        if (nl == std::string::npos) return false;
        name_ =
            std::string(StripSpace(std::string_view(buf_).substr(name_start_, nl - name_start_)));
        if (name_.empty() || name_.find('<') != std::string::npos) {
          return StartRecover("bad tool name");
        }
        pos_ = nl + 1;
        state_ = State::kDsFence;
        return true;
      }
      case State::kDsFence: {
        SkipSpace();
        const MatchKind k = MatchAt(buf_, pos_, "```json", eof_);
        if (k == MatchKind::kPartial) return false;
        if (k == MatchKind::kFull) {
          pos_ += 7;
          fence_ = true;
        } else if (pos_ < buf_.size() && buf_[pos_] == '{') {
          fence_ = false;  // tolerated: arguments without the code fence
        } else {
          return StartRecover("expected ```json before the arguments");
        }
        scanner_.Reset();
        state_ = State::kArgs;
        return true;
      }
      case State::kAfterArgs: {
        SkipSpace();
        if (fence_) {
          const MatchKind k = MatchAt(buf_, pos_, "```", eof_);
          if (k == MatchKind::kPartial) return false;
          if (k == MatchKind::kNo) return StartRecover("expected ``` after the arguments");
          pos_ += 3;
          fence_ = false;
          return true;
        }
        const MatchKind k = MatchAt(buf_, pos_, m_.call_end, eof_);
        if (k == MatchKind::kPartial) return false;
        if (k == MatchKind::kNo) {
          return StartRecover(Cat("expected ", m_.call_end, " after the arguments"));
        }
        pos_ += m_.call_end.size();
        CompleteSectionCall();
        state_ = State::kSectionIdle;
        return true;
      }
      case State::kRecover:
        return StepRecover();
    }
    return false;
  }

  bool StepOutside() {
    if (skip_space_) {  // whitespace right after a block is formatting
      SkipSpace();
      if (pos_ == buf_.size()) {
        scan_ = pos_;
        return false;
      }
      skip_space_ = false;
    }
    scan_ = std::max(scan_, pos_);
    const Hit hit = FindFirst(buf_, scan_, m_.openers, eof_);
    if (hit.kind == MatchKind::kFull) {
      // Whitespace right before a block is formatting too (the templates put
      // a newline between content and the first call).
      size_t text_end = hit.pos;
      while (text_end > pos_ && IsSpace(buf_[text_end - 1])) --text_end;
      EmitText(pos_, text_end);
      unit_start_ = hit.pos;
      pos_ = hit.pos + m_.openers[hit.which].size();
      body_start_ = pos_;
      if (family_ == ToolCallFamily::kHermes) {
        scanner_.Reset();
        state_ = State::kHermesBody;
      } else {
        state_ = State::kSectionIdle;
      }
      return true;
    }
    scan_ = hit.pos;
    size_t limit = hit.pos;
    if (!eof_) {
      // Trailing whitespace waits: it is dropped if a block follows.
      while (limit > pos_ && IsSpace(buf_[limit - 1])) --limit;
      if (hit.kind == MatchKind::kNo) limit = CompleteUtf8End(buf_, pos_, limit);
    }
    EmitText(pos_, limit);
    pos_ = limit;
    return false;
  }

  bool StepSectionIdle() {
    SkipSpace();
    if (pos_ == buf_.size()) return false;
    bool partial = false;
    MatchKind k = MatchAt(buf_, pos_, m_.call_begin, eof_);
    if (k == MatchKind::kFull) {
      unit_start_ = pos_;
      pos_ += m_.call_begin.size();
      body_start_ = header_scan_ = pos_;
      state_ = State::kCallHeader;
      return true;
    }
    partial |= k == MatchKind::kPartial;
    for (std::string_view end : m_.section_ends) {
      k = MatchAt(buf_, pos_, end, eof_);
      if (k == MatchKind::kFull) {
        pos_ += end.size();
        state_ = State::kOutside;
        skip_space_ = true;
        return true;
      }
      partial |= k == MatchKind::kPartial;
    }
    if (partial) return false;
    unit_start_ = body_start_ = pos_;
    return StartRecover("unexpected text inside the tool-call section");
  }

  bool StepCallHeader() {
    const Hit hit = FindFirst(buf_, header_scan_, header_markers_, eof_);
    header_scan_ = hit.pos;
    // Checked first and against the stream position, so the verdict does not
    // depend on how much had arrived when it was taken.
    if (hit.pos - body_start_ > kMaxHeaderBytes) return StartRecover("tool call header too long");
    if (hit.kind != MatchKind::kFull) return false;
    if (hit.which != 0) {
      return StartRecover(Cat("tool call header without ", m_.sep));
    }
    header_ =
        std::string(StripSpace(std::string_view(buf_).substr(body_start_, hit.pos - body_start_)));
    if (header_.empty() || header_.find('\n') != std::string::npos) {
      return StartRecover("bad tool call header");
    }
    pos_ = hit.pos + m_.sep.size();
    if (family_ == ToolCallFamily::kKimiK2) {
      // "functions.NAME:IDX" is the call's id; the name sits in between.
      id_ = header_;
      std::string_view name = header_;
      if (name.substr(0, 10) == "functions.") name.remove_prefix(10);
      if (const size_t colon = name.rfind(':');
          colon != std::string_view::npos && colon + 1 < name.size() &&
          std::all_of(name.begin() + colon + 1, name.end(), IsDigit)) {
        name = name.substr(0, colon);
      }
      // "functions.:0" or ":0" names nothing: a call must name its tool.
      if (name.empty()) return StartRecover("bad tool name");
      name_ = std::string(name);
      fence_ = false;
      scanner_.Reset();
      state_ = State::kArgs;
    } else {
      id_.clear();
      state_ = State::kAfterSep;
    }
    return true;
  }

  bool StartRecover(std::string reason) {
    recover_reason_ = std::move(reason);
    recover_scan_ = body_start_;
    state_ = State::kRecover;
    return true;
  }

  bool StepRecover() {
    const Hit hit = FindFirst(buf_, recover_scan_, recover_markers_, eof_);
    recover_scan_ = hit.pos;
    if (hit.kind != MatchKind::kFull) return false;
    // Closers are consumed with the bad call; openers start the next one.
    const bool consume = hit.which == 0;
    const size_t end = consume ? hit.pos + recover_markers_[0].size() : hit.pos;
    EmitError(recover_reason_, unit_start_, end, "");
    pos_ = end;
    if (family_ == ToolCallFamily::kHermes) {
      state_ = State::kOutside;
      skip_space_ = consume;
    } else {
      state_ = State::kSectionIdle;
    }
    return true;
  }

  void ReportUnterminated() {
    std::string message;
    size_t from = unit_start_;
    switch (state_) {
      case State::kOutside:
        return;
      case State::kSectionIdle:
        message = Cat("unterminated tool-call section: missing ", m_.section_ends[0]);
        from = pos_;
        break;
      case State::kRecover:
        message = Cat(recover_reason_, "; unterminated: missing ",
                      family_ == ToolCallFamily::kHermes ? m_.hermes_close : m_.call_end);
        break;
      default:
        message = Cat("unterminated tool call: missing ",
                      family_ == ToolCallFamily::kHermes ? m_.hermes_close : m_.call_end);
    }
    EmitError(message, from, buf_.size(), "");
  }

  void CompleteHermesCall() {
    auto parsed = ParseBoundedJson<Json>(
        std::string_view(buf_).substr(json_start_, json_end_ - json_start_), "tool call");
    const Json j = parsed.ok() ? *std::move(parsed) : Json();
    if (!j.is_object()) {
      EmitError("malformed JSON in tool call", unit_start_, pos_, "");
      return;
    }
    const auto name = j.find("name");
    if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) {
      EmitError("tool call without a \"name\" string", unit_start_, pos_, "");
      return;
    }
    Json args = Json::object();
    auto a = j.find("arguments");
    if (a == j.end()) a = j.find("parameters");  // spelling some Hermes fine-tunes use
    if (a != j.end()) args = *a;
    EmitCall(name->get<std::string>(), std::move(args), "");
  }

  void CompleteSectionCall() {
    auto args = ParseBoundedJson<Json>(
        std::string_view(buf_).substr(json_start_, json_end_ - json_start_), "tool call arguments");
    if (!args.ok()) {
      EmitError("malformed JSON arguments", unit_start_, pos_, name_);
      return;
    }
    EmitCall(name_, *std::move(args), id_);
  }

  void EmitCall(const std::string& name, Json args, const std::string& id) {
    if (args.is_string()) {  // arguments given as a JSON-encoded string
      // The string's own nesting is not the scanner's: bound it here too.
      auto parsed = ParseBoundedJson<Json>(args.get<std::string>(), "tool call arguments");
      if (!parsed.ok() || !parsed->is_object()) {
        EmitError("tool call arguments string is not a JSON object", unit_start_, pos_, name);
        return;
      }
      args = *std::move(parsed);
    }
    if (!args.is_object()) {
      EmitError("tool call arguments are not a JSON object", unit_start_, pos_, name);
      return;
    }
    if (!options_.tool_names.empty() &&
        std::find(options_.tool_names.begin(), options_.tool_names.end(), name) ==
            options_.tool_names.end()) {
      EmitError(Cat("unknown tool '", name, "'"), unit_start_, pos_, name);
      return;
    }
    ToolCallEvent e;
    e.kind = ToolCallEvent::Kind::kToolCall;
    e.id = id.empty() ? Cat("call_", std::to_string(next_call_index_++)) : id;
    e.name = name;
    // nlohmann's object is an ordered std::map, so dump() is canonical.
    e.arguments = args.dump(-1, ' ', false, Json::error_handler_t::replace);
    out_.push_back(std::move(e));
  }

  void EmitError(std::string message, size_t from, size_t to, const std::string& name) {
    ToolCallEvent e;
    e.kind = ToolCallEvent::Kind::kError;
    e.text = std::move(message);
    e.name = name;
    e.raw = buf_.substr(from, to - from);
    out_.push_back(std::move(e));
  }

  void EmitText(size_t from, size_t to) {
    if (from >= to) return;
    if (!out_.empty() && out_.back().kind == ToolCallEvent::Kind::kText) {
      out_.back().text.append(buf_, from, to - from);
      return;
    }
    ToolCallEvent e;
    e.text = buf_.substr(from, to - from);
    out_.push_back(std::move(e));
  }

  void SkipSpace() {
    while (pos_ < buf_.size() && IsSpace(buf_[pos_])) ++pos_;
  }

  // Drops consumed bytes between units (no offsets into the buffer are live
  // then except pos_ and scan_).
  void Compact() {
    if (pos_ == 0) return;
    if (state_ != State::kOutside && state_ != State::kSectionIdle) return;
    buf_.erase(0, pos_);
    scan_ = scan_ > pos_ ? scan_ - pos_ : 0;
    pos_ = 0;
  }

  const ToolCallFamily family_;
  const ToolCallParserOptions options_;
  const Markers m_;
  std::vector<std::string_view> recover_markers_;  // [0] is consumed with the bad call
  std::vector<std::string_view> header_markers_;   // [0] is the separator

  std::string buf_;
  size_t pos_ = 0;   // first unconsumed byte
  size_t scan_ = 0;  // kOutside: no opener starts in [pos_, scan_)
  bool eof_ = false;
  bool skip_space_ = false;
  State state_ = State::kOutside;
  JsonObjectScanner scanner_;

  size_t unit_start_ = 0;  // first byte of the current block or call (raw text of errors)
  size_t body_start_ = 0;  // after its opening marker
  size_t header_scan_ = 0;
  size_t recover_scan_ = 0;
  size_t name_start_ = 0;
  size_t json_start_ = 0, json_end_ = 0;
  bool fence_ = false;  // DeepSeek V3: a ``` must close the arguments
  std::string header_, name_, id_, recover_reason_;
  int64_t next_call_index_ = 0;

  std::vector<ToolCallEvent> out_;
};

}  // namespace

std::string_view ToolCallFamilyName(ToolCallFamily family) {
  switch (family) {
    case ToolCallFamily::kHermes:
      return "hermes";
    case ToolCallFamily::kDeepSeek:
      return "deepseek";
    case ToolCallFamily::kKimiK2:
      return "kimi_k2";
  }
  return "unknown";
}

std::unique_ptr<ToolCallParser> ToolCallParser::Create(ToolCallFamily family,
                                                       const ToolCallParserOptions& options) {
  return std::make_unique<StreamingParser>(family, options);
}

StatusOr<std::unique_ptr<ToolCallParser>> ToolCallParser::ForFamily(
    std::string_view family, const ToolCallParserOptions& options) {
  std::string f(family);
  for (char& c : f) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  if (f == "hermes" || f == "qwen") return Create(ToolCallFamily::kHermes, options);
  if (f == "deepseek" || f == "deepseek_v3" || f == "deepseek_v31") {
    return Create(ToolCallFamily::kDeepSeek, options);
  }
  if (f == "kimi_k2" || f == "kimi") return Create(ToolCallFamily::kKimiK2, options);
  return absl::InvalidArgumentError(
      Cat("unknown tool-call family '", family, "' (expected hermes, deepseek or kimi_k2)"));
}

StatusOr<std::unique_ptr<ToolCallParser>> ToolCallParser::ForTemplate(
    std::string_view chat_template, const ToolCallParserOptions& options) {
  // Each family's template spells its own call markers literally.
  auto has = [&](std::string_view s) { return chat_template.find(s) != std::string_view::npos; };
  if (has("<|tool_call_begin|>") || has("<|tool_calls_section_begin|>")) {
    return Create(ToolCallFamily::kKimiK2, options);
  }
  if (has("<｜tool▁call▁begin｜>") || has("<｜tool▁calls▁begin｜>")) {
    return Create(ToolCallFamily::kDeepSeek, options);
  }
  if (has("<tool_call>")) return Create(ToolCallFamily::kHermes, options);
  return absl::NotFoundError(
      "the chat template shows no known tool-call syntax (Hermes <tool_call>, DeepSeek "
      "<｜tool▁call▁begin｜>, Kimi <|tool_call_begin|>)");
}

}  // namespace strata
