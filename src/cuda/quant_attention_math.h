// The per-thread bodies of the quantized attention kernels (quant_attention_kernels.cu), as
// functions that compile both for the GPU (one thread per index, as the codec kernels) and for
// the host (QuantAttendHost runs them over every index), so the arithmetic the GPU runs is
// testable against runtime's ref::AttendQuant on machines without a GPU.
//
// The contract is runtime/quant_attention.h's AttendQuant: one query token's attention over a
// sequence of INT8/INT4 blocks read in place (the codes and their FP16 group parameters are
// dequantized in registers, no FP16 copy of K or V is written), GQA (query head h reads KV head
// h / (n_heads / n_kv_heads)), and out, head_lse, run_lse and run_mass defined exactly as there.
// Passes of one thread per index, in stream order:
//   1. ScoreAt (run i, head h, row t): s = sum_d q[h][d] * (code * k_scale + k_zero);
//   2. RunLseAt (i, h): run_lse = m + log sum_t e^(s - m), m the run's largest score;
//   3. HeadLseAt (h): head_lse = M + log sum_i e^(run_lse_i - M); RunMassAt (i): run_mass;
//      WeightAt (i, h, t): the score becomes its weight e^(s - head_lse);
//   4. PartialAt (i, h, d): sum_t weight * (code * v_scale + v_zero);
//   5. OutAt (h, d): the sum of the runs' partials.
// e^(s - head_lse) is the softmax weight itself (s <= head_lse), so no division follows, and the
// outputs merge with other parts by their log-sum-exps as the CPU kernels' do.
//
// Rounding: float throughout, every product and sum one IEEE round-to-nearest operation (the _rn
// intrinsics on the device, -ffp-contract=off on the host); e^x and log x are expf/logf on the
// device and std::exp/std::log on the host, which may differ in the last bits.
//
// Thread safety: pure functions over caller-owned memory (a body writes only its own outputs).
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/kernel_launch.h"
#include "cuda/quant_math.h"

namespace kvtier::cuda::internal {

#if defined(__CUDA_ARCH__)
KV_HOST_DEVICE inline float Exp(float x) { return expf(x); }
KV_HOST_DEVICE inline float Log(float x) { return logf(x); }
#else
inline float Exp(float x) { return std::exp(x); }
inline float Log(float x) { return std::log(x); }
#endif

// Key (t, c) of run r: code * k_scale + k_zero of key group t / group_size.
KV_HOST_DEVICE inline float KeyAt(const QuantAttendLaunch& a, const QuantAttendRun& r, uint32_t t,
                                  uint32_t c) {
  const uint64_t param = uint64_t{t / a.group_size} * a.channels + c;
  const auto* codes = reinterpret_cast<const uint8_t*>(r.payload + r.k_codes_offset);
  const uint32_t code = CodeOf(codes, a.bits, uint64_t{t} * a.channels + c);
  return Add(Mul(static_cast<float>(code), ParamF32(r.payload, r.k_scale_offset, param)),
             ParamF32(r.payload, r.k_zero_offset, param));
}

// Value (t, c) of run r: code * v_scale + v_zero of value group c / group_size of token t.
KV_HOST_DEVICE inline float ValueAt(const QuantAttendLaunch& a, const QuantAttendRun& r,
                                    uint32_t t, uint32_t c) {
  const uint64_t param = uint64_t{t} * a.value_groups + c / a.group_size;
  const auto* codes = reinterpret_cast<const uint8_t*>(r.payload + r.v_codes_offset);
  const uint32_t code = CodeOf(codes, a.bits, uint64_t{t} * a.channels + c);
  return Add(Mul(static_cast<float>(code), ParamF32(r.payload, r.v_scale_offset, param)),
             ParamF32(r.payload, r.v_zero_offset, param));
}

KV_HOST_DEVICE inline uint32_t KvHeadOf(const QuantAttendLaunch& a, uint32_t h) {
  return h / (a.n_heads / a.n_kv_heads);
}

KV_HOST_DEVICE inline uint64_t ScoreIndex(const QuantAttendLaunch& a, uint32_t i, uint32_t h,
                                          uint32_t t) {
  return (uint64_t{i} * a.n_heads + h) * a.max_rows + t;
}

// 1. Index x of n_runs * n_heads * max_rows (t fastest): the score of row t, when the run has it.
KV_HOST_DEVICE inline void ScoreAt(const QuantAttendLaunch& a, uint64_t x) {
  const auto t = static_cast<uint32_t>(x % a.max_rows);
  const auto h = static_cast<uint32_t>(x / a.max_rows % a.n_heads);
  const auto i = static_cast<uint32_t>(x / a.max_rows / a.n_heads);
  const QuantAttendRun& r = a.runs[i];
  if (t >= r.rows) return;
  const uint32_t c0 = KvHeadOf(a, h) * a.head_dim;
  const float* q = a.q + uint64_t{h} * a.head_dim;
  float s = 0.0f;
  for (uint32_t d = 0; d < a.head_dim; ++d) s = Add(s, Mul(q[d], KeyAt(a, r, t, c0 + d)));
  a.scores[ScoreIndex(a, i, h, t)] = s;
}

// 2. Index x of n_runs * n_heads (h fastest): run_lse[x], the log-sum-exp of run x / n_heads's
// scores of head x % n_heads.
KV_HOST_DEVICE inline void RunLseAt(const QuantAttendLaunch& a, uint64_t x) {
  const auto h = static_cast<uint32_t>(x % a.n_heads);
  const auto i = static_cast<uint32_t>(x / a.n_heads);
  const uint32_t rows = a.runs[i].rows;
  const float* s = a.scores + ScoreIndex(a, i, h, 0);
  float m = s[0];
  for (uint32_t t = 1; t < rows; ++t) m = s[t] > m ? s[t] : m;
  float l = 0.0f;
  for (uint32_t t = 0; t < rows; ++t) l = Add(l, Exp(Sub(s[t], m)));
  a.run_lse[x] = Add(m, Log(l));
}

// 3a. Index h of n_heads: head_lse[h], the log-sum-exp of its runs' log-sum-exps.
KV_HOST_DEVICE inline void HeadLseAt(const QuantAttendLaunch& a, uint64_t h) {
  float m = a.run_lse[h];
  for (uint64_t i = 1; i < a.n_runs; ++i) {
    const float v = a.run_lse[i * a.n_heads + h];
    m = v > m ? v : m;
  }
  float l = 0.0f;
  for (uint64_t i = 0; i < a.n_runs; ++i) l = Add(l, Exp(Sub(a.run_lse[i * a.n_heads + h], m)));
  a.head_lse[h] = Add(m, Log(l));
}

// 3b. Index i of n_runs: run_mass[i] = (1 / n_heads) sum_h e^(run_lse[i][h] - head_lse[h])
// (after 3a).
KV_HOST_DEVICE inline void RunMassAt(const QuantAttendLaunch& a, uint64_t i) {
  float mass = 0.0f;
  for (uint32_t h = 0; h < a.n_heads; ++h) {
    mass = Add(mass, Exp(Sub(a.run_lse[i * a.n_heads + h], a.head_lse[h])));
  }
  a.run_mass[i] = Div(mass, static_cast<float>(a.n_heads));
}

// 3c. Index x as in ScoreAt: the score turned into its softmax weight e^(s - head_lse[h]).
KV_HOST_DEVICE inline void WeightAt(const QuantAttendLaunch& a, uint64_t x) {
  const auto t = static_cast<uint32_t>(x % a.max_rows);
  const auto h = static_cast<uint32_t>(x / a.max_rows % a.n_heads);
  const auto i = static_cast<uint32_t>(x / a.max_rows / a.n_heads);
  if (t >= a.runs[i].rows) return;
  a.scores[x] = Exp(Sub(a.scores[x], a.head_lse[h]));
}

// 4. Index x of n_runs * n_heads * head_dim (d fastest): run i's weighted sum of the values of
// head h, channel d (after 3c).
KV_HOST_DEVICE inline void PartialAt(const QuantAttendLaunch& a, uint64_t x) {
  const auto d = static_cast<uint32_t>(x % a.head_dim);
  const auto h = static_cast<uint32_t>(x / a.head_dim % a.n_heads);
  const auto i = static_cast<uint32_t>(x / a.head_dim / a.n_heads);
  const QuantAttendRun& r = a.runs[i];
  const float* w = a.scores + ScoreIndex(a, i, h, 0);
  const uint32_t c = KvHeadOf(a, h) * a.head_dim + d;
  float acc = 0.0f;
  for (uint32_t t = 0; t < r.rows; ++t) acc = Add(acc, Mul(w[t], ValueAt(a, r, t, c)));
  a.partial[x] = acc;
}

// 5. Index x of n_heads * head_dim: out[x], the runs' partials summed in run order.
KV_HOST_DEVICE inline void OutAt(const QuantAttendLaunch& a, uint64_t x) {
  const uint64_t per_run = uint64_t{a.n_heads} * a.head_dim;
  float sum = 0.0f;
  for (uint32_t i = 0; i < a.n_runs; ++i) sum = Add(sum, a.partial[i * per_run + x]);
  a.out[x] = sum;
}

// Host run of the kernels (quant_attention_host.cc): every index of every pass, in kernel order.
void QuantAttendHost(const QuantAttendLaunch& args);

}  // namespace kvtier::cuda::internal
