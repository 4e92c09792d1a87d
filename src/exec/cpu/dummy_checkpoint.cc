// Host dummy checkpoints from a layer list's tensor list.
#include "exec/cpu/dummy_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "base/file_error.h"
#include "base/splitmix64.h"
#include "exec/cpu/cpu_executor.h"
#include "model/safetensors_writer.h"

namespace strata::exec {

Status WriteDummyCheckpoint(const ArchSpec& spec, const std::string& dir, uint64_t seed,
                            uint64_t max_bytes) {
  STRATA_ASSIGN_OR_RETURN(const std::vector<BoundTensor> tensors, ListTensors(spec));
  using Kind = BoundTensor::Kind;
  uint64_t bytes = 0;
  for (const BoundTensor& t : tensors) {
    bytes += static_cast<uint64_t>(t.NumElements()) * (t.kind == Kind::kMatrix ? 2 : 4);
  }
  if (bytes > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "dummy weights on the CPU are limited to ", max_bytes >> 20, " MiB; this config needs ",
        bytes >> 20, " MiB (use --device cuda for large dummy models)"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return FileError(absl::StrCat(dir, ": cannot create directory"), ec);
  SafetensorsWriter w;
  uint64_t index = 0;
  for (const BoundTensor& t : tensors) {
    // A counter-based stream, so that no value depends on the order of
    // generation.
    const uint64_t base = SplitMix64(seed ^ SplitMix64(++index));
    auto uniform = [&](size_t i, float lo, float hi) {
      const uint64_t h = SplitMix64(base + static_cast<uint64_t>(i));
      return lo + (hi - lo) * static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
    };
    const size_t n = static_cast<size_t>(t.NumElements());
    if (t.kind == Kind::kMatrix) {
      std::vector<uint8_t> raw(n * 2);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = F32ToBf16(uniform(i, -0.02f, 0.02f));
        std::memcpy(raw.data() + 2 * i, &h, 2);
      }
      w.Add(t.name, DType::kBF16, t.shape, std::move(raw));
      continue;
    }
    std::vector<float> v(n, spec.zero_centred_norms ? 0.f : 1.f);
    if (t.kind == Kind::kVector) {
      for (size_t i = 0; i < n; ++i) v[i] = uniform(i, 0.5f, 1.5f);
    }
    w.AddF32(t.name, DType::kF32, t.shape, v);
  }
  w.SetMetadata("format", "pt");
  w.SetMetadata("strata_dummy", "random weights (--load-format dummy)");
  return w.WriteFile((std::filesystem::path(dir) / "model.safetensors").string());
}

}  // namespace strata::exec
