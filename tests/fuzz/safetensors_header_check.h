// The oracle shared by the libFuzzer target and the corpus replay test: parse
// arbitrary bytes and, when the parser accepts them, check every promise the
// parsed header makes (tiling, sizes, sort order) and that writing it back out
// with SafetensorsWriter yields a file that parses to the same table.
// Rejection is always fine; a crash, UB or a broken promise is not.
#ifndef STRATA_TESTS_FUZZ_SAFETENSORS_HEADER_CHECK_H_
#define STRATA_TESTS_FUZZ_SAFETENSORS_HEADER_CHECK_H_

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "model/safetensors_writer.h"

namespace strata::fuzz {

struct CheckResult {
  bool parsed_ok = false;
  std::string violation;  // empty when every invariant held
};

inline bool SameTable(const SafetensorsHeader& a, const SafetensorsHeader& b) {
  if (a.tensors.size() != b.tensors.size() || a.metadata != b.metadata) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const SafetensorsTensor& x = a.tensors[i];
    const SafetensorsTensor& y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.begin != y.begin ||
        x.end != y.end) {
      return false;
    }
  }
  return true;
}

inline CheckResult CheckSafetensorsHeader(const uint8_t* data, size_t size) {
  CheckResult r;
  StatusOr<SafetensorsHeader> h = ParseSafetensorsHeader("fuzz.safetensors", data, size);
  if (!h.ok()) {
    if (h.status().message().empty()) r.violation = "error without a message";
    return r;
  }
  r.parsed_ok = true;
  if (h->data_offset != 8 + h->header_bytes || h->data_offset > size) {
    r.violation = "data_offset inconsistent with header_bytes or file size";
    return r;
  }
  const uint64_t data_size = size - h->data_offset;
  uint64_t covered = 0;
  std::set<std::string> names;
  for (const SafetensorsTensor& t : h->tensors) {
    if (t.name.empty() || !names.insert(t.name).second) r.violation = "empty or repeated name";
    if (t.begin != covered) r.violation = "tensors do not tile the data section in order";
    if (t.end < t.begin || t.end > data_size) r.violation = "tensor outside the data section";
    int64_t n = 1;
    for (int64_t d : t.shape) {
      if (d < 0) r.violation = "negative dimension";
      if (d != 0 && n > INT64_MAX / d)
        r.violation = "element count overflows";
      else
        n *= d;
    }
    if (r.violation.empty() && (n != t.NumElements() ||
                                static_cast<uint64_t>(n) * DTypeSize(t.dtype) != t.end - t.begin)) {
      r.violation = "byte count does not match dtype and shape";
    }
    if (!r.violation.empty()) return r;
    covered = t.end;
  }
  if (covered != data_size) {
    r.violation = "tensors do not cover the data section";
    return r;
  }

  // Round trip through the writer: same table, same bytes.
  SafetensorsWriter w;
  for (const auto& [k, v] : h->metadata) w.SetMetadata(k, v);
  const uint8_t* section = data + h->data_offset;
  for (const SafetensorsTensor& t : h->tensors) {
    w.Add(t.name, t.dtype, t.shape, std::vector<uint8_t>(section + t.begin, section + t.end));
  }
  const std::vector<uint8_t> again = w.Serialize();
  StatusOr<SafetensorsHeader> h2 =
      ParseSafetensorsHeader("again.safetensors", again.data(), again.size());
  if (!h2.ok()) {
    r.violation =
        "writer output of an accepted header was rejected: " + std::string(h2.status().message());
  } else if (!SameTable(*h, *h2)) {
    r.violation = "writer round trip changed the tensor table";
  } else if (again.size() - h2->data_offset != data_size ||
             !std::equal(section, section + data_size, again.data() + h2->data_offset)) {
    r.violation = "writer round trip changed the data section";
  }
  return r;
}

}  // namespace strata::fuzz

#endif  // STRATA_TESTS_FUZZ_SAFETENSORS_HEADER_CHECK_H_
