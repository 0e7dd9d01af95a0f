#!/usr/bin/env bash
# Device checks of the CUDA backend (docs/cuda.md), for a machine with an NVIDIA GPU (sized for
# one H100/H200 with 16 cores: about 3 minutes of build and under 1 minute of tests and
# benchmark). From the repository root:
#
#   tests/cuda/device_checks.sh [build-dir]          (default build-device)
#
# 1. Configures a Release build with KVTIER_WITH_CUDA=ON and builds only the CUDA layer, its
#    tests and cuda_bench.
# 2. Runs the CUDA tests; a GPU test that skips counts as a failure here (on this machine the
#    GPU must be usable).
# 3. Builds and runs engine_test, whose engines must pick the CUDA backend (device_backend=auto).
# 4. Runs cuda_bench and prints its JSON (also written to $OUT/cuda_bench.json when $OUT is set).
# Exits non-zero on the first failure.
set -euo pipefail

build_dir="${1:-build-device}"
jobs="$(nproc)"
out_dir="${OUT:-}"
log() { printf '== %s\n' "$*" >&2; }

log "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv >&2 || true

log "configure (${build_dir})"
cmake -S . -B "${build_dir}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_WITH_CUDA=ON \
  -DKVTIER_BUILD_BENCH=OFF >/dev/null

tests=(cuda_layout_test cuda_quant_math_test cuda_gds_test cuda_tier_test cuda_kernels_test
  cuda_quant_attention_test)
log "build: kvtier_cuda ${tests[*]} cuda_bench"
ninja -C "${build_dir}" -j "${jobs}" kvtier_cuda "${tests[@]}" cuda_bench >&2

status=0
for t in "${tests[@]}"; do
  log "test ${t}"
  result="$(mktemp)"
  if ! timeout 300 "${build_dir}/src/cuda/${t}" >"${result}" 2>&1; then
    cat "${result}" >&2
    status=1
  elif grep -q "SKIPPED" "${result}"; then
    cat "${result}" >&2
    log "${t}: a test skipped although a GPU should be usable"
    status=1
  else
    tail -n 1 "${result}" >&2
  fi
  if [[ -n "${out_dir}" ]]; then cp "${result}" "${out_dir}/${t}.log"; fi
  rm -f "${result}"
done

# The engine on the CUDA backend: device_backend=auto must pick CUDA here, and every engine test
# then runs its device tier on the GPU and its host tier pinned.
log "engine_test (device_backend=auto -> cuda)"
ninja -C "${build_dir}" -j "${jobs}" engine_test >&2
result="$(mktemp)"
if ! timeout 300 "${build_dir}/src/engine/engine_test" >"${result}" 2>&1; then
  cat "${result}" >&2
  status=1
elif ! grep -q "usable GPU: yes" "${result}"; then
  cat "${result}" >&2
  log "engine_test: the engine did not see a usable GPU"
  status=1
else
  tail -n 1 "${result}" >&2
fi
if [[ -n "${out_dir}" ]]; then cp "${result}" "${out_dir}/engine_test.log"; fi
rm -f "${result}"

log "cuda_bench"
json="$(timeout 300 "${build_dir}/bench/cuda_bench")"
printf '%s\n' "${json}"
if [[ -n "${out_dir}" ]]; then printf '%s\n' "${json}" >"${out_dir}/cuda_bench.json"; fi
exit "${status}"
