// The safetensors container format: header parsing (pure, fuzzed) and the
// tensor table it yields. Mapping files and naming tensors across shards is
// weight_store.h's job.
//
// Layout: [u64 little-endian N][N bytes of JSON header][data section]. The header
// maps tensor names to {dtype, shape, data_offsets:[begin,end]} relative to the
// start of the data section, plus an optional "__metadata__" string map.
#ifndef STRATA_MODEL_SAFETENSORS_H_
#define STRATA_MODEL_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace strata {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offset into the data section
  uint64_t end = 0;    // one past the last byte
  int64_t NumElements() const;
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;       // N, the JSON length
  uint64_t data_offset = 0;        // 8 + N: where the data section starts in the file
  std::vector<SafetensorsTensor> tensors;  // sorted by begin offset
  std::map<std::string, std::string> metadata;
};

// Parses and fully validates the header of a safetensors file whose complete
// contents are `file_bytes` (only the prefix is read for the JSON, but the size
// is needed to check offsets). `file_name` is used in error messages only.
//
// Errors (InvalidArgument / DataLoss) name the file and, where relevant, the
// tensor and byte offset: file shorter than 8 bytes, header length past the end
// of the file, header not valid JSON or not an object, unknown dtype, bad shape,
// offsets out of range, reversed, overlapping, or leaving gaps, byte count not
// equal to dtype size x element count, duplicate names.
StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file_name,
                                                   const uint8_t* file_bytes,
                                                   uint64_t file_size);

}  // namespace strata

#endif  // STRATA_MODEL_SAFETENSORS_H_
