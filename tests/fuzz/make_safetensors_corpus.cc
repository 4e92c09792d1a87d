// Writes the seed corpus for safetensors_header_fuzzer into the directory given
// as argv[1]: small valid files made with SafetensorsWriter (ok_*) and one file
// per kind of malformation the parser must reject (bad_*). The output is
// committed under tests/fuzz/corpus/safetensors_header/; rerun this (target
// make_safetensors_corpus) after changing it.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "model/safetensors_writer.h"

namespace {

using strata::DType;
using strata::SafetensorsWriter;

std::vector<uint8_t> Raw(const std::string& header, size_t data_bytes, uint64_t declared) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(declared >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0x5a);
  return out;
}

std::vector<uint8_t> Raw(const std::string& header, size_t data_bytes = 0) {
  return Raw(header, data_bytes, header.size());
}

bool Write(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<std::pair<std::string, std::vector<uint8_t>>> files;

  // Valid files.
  files.emplace_back("ok_empty.safetensors", SafetensorsWriter().Serialize());
  {
    SafetensorsWriter w;
    w.AddF32("model.norm.weight", DType::kF32, {4}, {1.0f, 2.0f, 3.0f, 4.0f});
    files.emplace_back("ok_single_f32.safetensors", w.Serialize());
  }
  {
    SafetensorsWriter w;
    w.AddF32("f32", DType::kF32, {2}, {1.0f, -1.0f});
    w.AddF32("f16", DType::kF16, {3}, {0.5f, 65504.0f, -0.0f});
    w.AddF32("bf16", DType::kBF16, {2, 1}, {3.0f, 1e30f});
    w.AddF32("i32", DType::kI32, {1}, {-7.0f});
    w.AddF32("i64", DType::kI64, {1}, {9.0f});
    w.Add("u8", DType::kU8, {3}, {1, 2, 3});
    files.emplace_back("ok_all_dtypes.safetensors", w.Serialize());
  }
  {
    SafetensorsWriter w;
    w.SetMetadata("format", "pt");
    w.SetMetadata("escaped", "tab\tquote\"slash\\");
    w.AddF32("lm_head.weight", DType::kBF16, {2, 2}, {1.0f, 2.0f, 3.0f, 4.0f});
    files.emplace_back("ok_metadata.safetensors", w.Serialize());
  }
  {
    SafetensorsWriter w;
    w.Add("empty.before", DType::kF32, {0}, {});
    w.AddF32("x", DType::kF16, {1, 2}, {1.0f, 2.0f});
    w.Add("empty.middle", DType::kI64, {3, 0, 2}, {});
    w.AddF32("y", DType::kF32, {1}, {5.0f});
    w.Add("scalar", DType::kU8, {}, {42});
    files.emplace_back("ok_zero_sized.safetensors", w.Serialize());
  }
  {
    SafetensorsWriter w;
    for (int i = 0; i < 12; ++i) {
      w.AddF32("model.layers." + std::to_string(i) + ".self_attn.q_proj.weight", DType::kBF16,
               {2, 2}, {1.0f, 0.0f, 0.0f, 1.0f});
    }
    files.emplace_back("ok_many_tensors.safetensors", w.Serialize());
  }
  {
    SafetensorsWriter w;
    w.AddF32("\xc3\xa9t\xc3\xa9.\xe2\x82\xac", DType::kF32, {1}, {1.0f});  // "été.€"
    files.emplace_back("ok_unicode_name.safetensors", w.Serialize());
  }
  // Hand-written but valid: reordered keys, whitespace, escapes.
  files.emplace_back("ok_handwritten.safetensors",
                     Raw(" {\n \"a\\u0062\" : {\"shape\":[ 2 ],\"data_offsets\":[0,8],"
                         "\"dtype\":\"F32\", \"extra\": null}} ",
                         8));

  // Malformed files, one defect each.
  files.emplace_back("bad_short.safetensors", std::vector<uint8_t>{3, 0, 0, 0, 0});
  files.emplace_back("bad_len_past_end.safetensors", Raw("{}", 0, 1234567));
  files.emplace_back("bad_len_huge.safetensors", Raw("{}", 0, ~uint64_t{0}));
  files.emplace_back("bad_json.safetensors", Raw("{\"a\": {\"dtype\": F32}}"));
  files.emplace_back("bad_json_truncated.safetensors", Raw("{\"a\": {\"dtype\": \"F32\""));
  files.emplace_back("bad_not_object.safetensors", Raw("[1, 2, 3]"));
  files.emplace_back("bad_unknown_dtype.safetensors",
                     Raw(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8));
  files.emplace_back("bad_reversed.safetensors",
                     Raw(R"({"w":{"dtype":"U8","shape":[6],"data_offsets":[10,4]}})", 16));
  files.emplace_back("bad_overlap.safetensors",
                     Raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         12));
  files.emplace_back("bad_gap.safetensors",
                     Raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                         12));
  files.emplace_back("bad_trailing.safetensors",
                     Raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12));
  files.emplace_back("bad_out_of_range.safetensors",
                     Raw(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8));
  files.emplace_back("bad_byte_mismatch.safetensors",
                     Raw(R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,6]}})", 6));
  files.emplace_back("bad_negative_shape.safetensors",
                     Raw(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4));
  files.emplace_back("bad_shape_overflow.safetensors",
                     Raw(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],)"
                         R"("data_offsets":[0,0]}})"));
  files.emplace_back("bad_metadata.safetensors", Raw(R"({"__metadata__":{"format":1}})"));
  files.emplace_back("bad_deep.safetensors", Raw(std::string(500, '[') + std::string(500, ']')));
  {
    SafetensorsWriter w;
    w.AddF32("dup", DType::kF32, {1}, {1.0f});
    w.AddF32("dup", DType::kF32, {1}, {2.0f});
    files.emplace_back("bad_duplicate.safetensors", w.Serialize());
  }
  {
    SafetensorsWriter w;
    w.AddF32("w", DType::kF32, {8}, std::vector<float>(8, 1.0f));
    std::vector<uint8_t> bytes = w.Serialize();
    bytes.resize(bytes.size() - 5);
    files.emplace_back("bad_truncated_data.safetensors", bytes);
  }

  for (const auto& [name, bytes] : files) {
    if (!Write(dir, name, bytes)) {
      std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name.c_str());
      return 1;
    }
  }
  std::printf("wrote %zu files to %s\n", files.size(), dir.c_str());
  return 0;
}
