// libFuzzer's entry point around an oracle (a function of the input bytes
// whose result has a `violation` string): a violation aborts, so libFuzzer
// keeps the input as a crash.
#ifndef STRATA_TESTS_FUZZ_FUZZ_TARGET_H_
#define STRATA_TESTS_FUZZ_FUZZ_TARGET_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define STRATA_FUZZ_TARGET(oracle)                                                \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {       \
    const auto result = oracle(data, size);                                       \
    if (!result.violation.empty()) {                                              \
      std::fprintf(stderr, "invariant violated: %s\n", result.violation.c_str()); \
      std::abort();                                                               \
    }                                                                             \
    return 0;                                                                     \
  }

#endif  // STRATA_TESTS_FUZZ_FUZZ_TARGET_H_
