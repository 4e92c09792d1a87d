#!/usr/bin/env bash
# Installs every build and test dependency of Strata by name from the package
# registries (Debian packages; PyPI only for the optional reference tooling).
# Idempotent: skips the install when everything is already present.
set -euo pipefail

PKGS=(build-essential cmake ninja-build pkg-config git
      libabsl-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
      libstb-dev libcurl4-openssl-dev libssl-dev libpcre2-dev clang libclang-rt-14-dev doxygen
      python3 python3-venv)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all build and test dependencies present"
fi

# Reference libraries for the live text tests (tokenizers, chat templates): a
# private virtual environment, so the system Python is never modified.
VENV="$(cd "$(dirname "$0")/.." && pwd)/.venv-ref"
REQS="$(dirname "$0")/reference/requirements-text.txt"
if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$REQS" "$VENV/requirements.txt"; then
  echo "setup: creating $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQS"
  cp "$REQS" "$VENV/requirements.txt"
fi

# CUTLASS headers for the CUDA build's Hopper grouped GEMM (MoE prefill;
# CMake finds them under .deps/cutlass, see STRATA_CUTLASS_DIR): only where
# nvcc exists, from PyPI by name and version, headers only (--no-deps: the
# package's Python dependencies are not needed to compile).
CUTLASS_VERSION=4.2.0.0
CUTLASS_DIR="$(cd "$(dirname "$0")/.." && pwd)/.deps/cutlass"
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  if [ ! -f "$CUTLASS_DIR/cutlass_library/source/include/cutlass/cutlass.h" ] ||
     [ "$(cat "$CUTLASS_DIR/VERSION" 2>/dev/null)" != "$CUTLASS_VERSION" ]; then
    echo "setup: installing nvidia-cutlass==$CUTLASS_VERSION into $CUTLASS_DIR"
    rm -rf "$CUTLASS_DIR"
    # The private venv's pip: Debian's python3 has no pip module unless python3-pip is installed.
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --target "$CUTLASS_DIR" \
      "nvidia-cutlass==$CUTLASS_VERSION"
    echo "$CUTLASS_VERSION" > "$CUTLASS_DIR/VERSION"
  fi
fi
