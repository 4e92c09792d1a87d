#!/usr/bin/env bash
# On the GPU, a host on the C ABI gets the tokens the CLI gets: capi_abi_test
# prints its greedy tokens from STRATA_DEVICE_CUDA ("tokens on cuda:...: ..."),
# and `strata generate --device cuda` runs the same prompt on the same model.
# Usage: abi_matches_cli_gpu.sh CAPI_ABI_TEST STRATA_CLI MODEL_DIR
set -euo pipefail
abi_test=$1 cli=$2 model=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The prompt of capi_abi_test's greedy(), as the int32 .npy the CLI reads.
python3 - "$tmp/prompt.npy" <<'PY'
import struct, sys
ids = [1, 17, 42, 99, 7, 3, 250, 11]
header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }" % len(ids)
header += " " * (63 - (10 + len(header)) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack("<%di" % len(ids), *ids))
PY
abi=$(STRATA_TEST_DEVICE=cuda "$abi_test" "$model" | sed -n 's/^tokens on cuda:[^:]*: *//p')
cli=$("$cli" generate --model "$model" --tokens "$tmp/prompt.npy" --max-new 12 --ignore-eos --device cuda 2>"$tmp/err")
echo "C ABI: $abi"
echo "CLI:   $cli"
if [ -z "$abi" ] || [ "$abi" != "$cli" ]; then
  echo "FAILED: the tokens differ (or the ABI run printed none)"; cat "$tmp/err"; exit 1
fi
if grep -q "running on the CPU" "$tmp/err"; then echo "FAILED: the CLI fell back to the CPU:"; cat "$tmp/err"; exit 1; fi
echo "1 passed, 0 failed"
