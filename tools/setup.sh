#!/usr/bin/env bash
# Installs every build and test dependency of Strata by name from the package
# registries (Debian packages; PyPI only for the optional reference tooling).
# Idempotent: skips the install when everything is already present.
set -euo pipefail

PKGS=(build-essential cmake ninja-build pkg-config git
      libabsl-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
      libstb-dev libcurl4-openssl-dev clang libclang-rt-14-dev python3)

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
