#!/usr/bin/env bash
# Installs the Debian packages kvtier needs to build, test and benchmark, then the project's
# Python tools from PyPI, pinned, into their own virtual environment (.venv-tools): lizard,
# which the function_length_check test runs (tests/style).
# Idempotent: packages already installed are skipped, `apt-get update` runs only when something
# is missing, and a tools environment that already has the pinned versions is kept. Nothing else
# is downloaded outside Debian's package archive. Run as root (or through sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

LIZARD_VERSION=1.24.3

packages=(
  # Toolchain.
  g++ cmake ninja-build pkg-config git
  ccache           # Rebuilds (presets, fresh clones, CI) compile only what changed.
  clang libclang-rt-14-dev   # clang build: -Wthread-safety and the sanitizer job.
  # Libraries.
  liburing-dev     # io_uring for the SSD tier.
  libzstd-dev      # shuffle-zstd codec.
  libssl-dev       # SHA-256 (libcrypto) for block keys.
  libisal-dev      # CRC32C with SSE4.2/PCLMUL dispatch and a portable fallback.
  libopenblas-dev  # BLAS for the reference runtime's matrix products.
  libnuma-dev      # NUMA binding of host tiers (CXL expanders are CPU-less NUMA nodes).
  libhiredis-dev redis-server redis-tools  # Remote tier; tests start their own servers.
  libfmt-dev libcli11-dev nlohmann-json3-dev
  libmicrohttpd-dev  # The node service's HTTP endpoint (/metrics, /healthz).
  # Tests and benchmarks.
  libgtest-dev libgmock-dev libbenchmark-dev
  fio zstd         # Benchmarks compare against the disk (fio) and the zstd CLI.
  python3
  # Python module (bindings/python) and its tests; Debian's /usr/bin/python3 owns these.
  python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pytest
  python3-venv     # The virtual environment vLLM runs in (scripts/setup_vllm_venv.sh).
  python3-matplotlib  # bench/plot.py: the PNG plots in docs/benchmarks.md, and its test.
)

# AES-256-GCM of sealed remote values and SSD records with VAES/AVX-512 (Intel's library, x86-64
# only; elsewhere OpenSSL does it alone).
if [ "$(dpkg --print-architecture)" = amd64 ]; then
  packages+=(libipsec-mb-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

install_packages() {
  if [ ${#missing[@]} -eq 0 ]; then
    echo "install_deps: all ${#packages[@]} packages present"
    return
  fi
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then SUDO=sudo; else
      echo "install_deps: missing packages (${missing[*]}) and not root; run as root" >&2
      exit 1
    fi
  fi
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# The tools environment, on Debian's python3 (python3-venv above).
install_tools_venv() {
  local venv=.venv-tools
  local stamp="$venv/.kvtier-tools-lizard-$LIZARD_VERSION"
  if [ -f "$stamp" ]; then
    echo "install_deps: $venv has lizard $LIZARD_VERSION"
    return
  fi
  echo "install_deps: installing lizard $LIZARD_VERSION into $venv"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "lizard==$LIZARD_VERSION"
  touch "$stamp"
}

install_packages
install_tools_venv
