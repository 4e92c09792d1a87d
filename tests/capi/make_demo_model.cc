// Test-only helper: writes the demo kimi_linear model (random weights,
// deterministic) with the demo tokenizer and chat template into the directory
// given on the command line, and the same model without tokenizer files into
// DIR_no_tokenizer (the token-id-only case). The C ABI tests cannot call C++,
// so ctest runs this first as a fixture.
#include <cstdio>
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
  std::printf("wrote demo model with tokenizer to %s and without to %s\n", dir.c_str(), bare.c_str());
  return 0;
}
