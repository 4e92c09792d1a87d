// Test-only helper: writes the demo kimi_linear model (random weights,
// deterministic) into the directory given on the command line. The C ABI test
// cannot call C++, so ctest runs this first as a fixture.
#include <cstdio>

#include "model/demo_model.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const strata::Status s = strata::WriteDemoKimiLinearModel(argv[1]);
  if (!s.ok()) {
    std::fprintf(stderr, "make_demo_model: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("wrote demo model to %s\n", argv[1]);
  return 0;
}
