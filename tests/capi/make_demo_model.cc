// Test-only helper: writes the demo kimi_linear model (random weights,
// deterministic) with the demo tokenizer and chat template into the directory
// given on the command line, and the same model without tokenizer files into
// DIR_no_tokenizer (the token-id-only case), and the demo tokenizer alone,
// without tokenizer_config.json and so without chat template, into
// DIR_no_template. The C ABI tests cannot call C++, so ctest runs this first
// as a fixture.
#include <cstdio>
#include <filesystem>
#include <string>

#include "model/demo_model.h"
#include "text/demo_tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::string bare = dir + "_no_tokenizer";
  for (const strata::Status& s : {strata::WriteDemoKimiLinearModel(dir), strata::WriteDemoTokenizer(dir),
                                  strata::WriteDemoKimiLinearModel(bare)}) {
    if (!s.ok()) {
      std::fprintf(stderr, "make_demo_model: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const std::filesystem::path no_template = dir + "_no_template";
  std::error_code ec;
  std::filesystem::create_directories(no_template, ec);
  if (!ec) {
    std::filesystem::copy_file(std::filesystem::path(dir) / "tokenizer.json", no_template / "tokenizer.json",
                               std::filesystem::copy_options::overwrite_existing, ec);
  }
  if (ec) {
    std::fprintf(stderr, "make_demo_model: %s: %s\n", no_template.c_str(), ec.message().c_str());
    return 1;
  }
  std::printf("wrote demo model with tokenizer to %s, without to %s, the tokenizer alone to %s\n", dir.c_str(),
              bare.c_str(), no_template.c_str());
  return 0;
}
