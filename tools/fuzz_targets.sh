# The libFuzzer targets (tests/fuzz/*_fuzzer.cc), for tools/fuzz.sh and
# tools/fuzz_all.sh to source: each target's committed corpus directory under
# tests/fuzz/corpus/, its dictionary tests/fuzz/<target>.dict, and the
# longest input worth mutating (its largest seeds must fit, or libFuzzer
# would cut them).
STRATA_FUZZ_TARGETS=(safetensors_header safetensors_index config tokenizer_json tokenizer_config
                     tiktoken jinja tool_call host_json session_file state_object)

# fuzz_corpus_of TARGET: the corpus directory name.
fuzz_corpus_of() {
  case "$1" in
    tool_call) echo tool_calls ;;
    *) echo "$1" ;;
  esac
}

# fuzz_max_len_of TARGET: libFuzzer's -max_len.
fuzz_max_len_of() {
  case "$1" in
    tokenizer_json | tokenizer_config | tiktoken) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

# fuzz_known TARGET: whether TARGET is one of them.
fuzz_known() {
  local t
  for t in "${STRATA_FUZZ_TARGETS[@]}"; do [[ "$t" == "$1" ]] && return 0; done
  return 1
}
