#include "runtime/quant_attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "codecs/block_format.h"
#include "codecs/kernels.h"
#include "core/coding.h"
#include "runtime/kernels.h"
#include "runtime/quant_attention_view.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace kvtier::runtime {

namespace qattn {

QuantBlockView ViewOf(const QuantKvRun& run, size_t channels, uint32_t bits, uint32_t group_size) {
  // Only the counts matter to the layout: C channels as one KV head of C elements.
  const codecs::BlockGeometry geometry = {.tokens = run.block_tokens,
                                          .kv_heads = 1,
                                          .head_dim = static_cast<uint32_t>(channels),
                                          .dtype = DType::kF16};
  const codecs::QuantLayout l = codecs::ComputeQuantLayout(geometry, bits, group_size);
  const std::byte* p = run.payload;
  return {.k_scale = p + l.k_scale_offset,
          .k_zero = p + l.k_zero_offset,
          .v_scale = p + l.v_scale_offset,
          .v_zero = p + l.v_zero_offset,
          .k_codes = reinterpret_cast<const uint8_t*>(p + l.k_codes_offset),
          .v_codes = reinterpret_cast<const uint8_t*>(p + l.v_codes_offset)};
}

namespace {

// The parts of IntValueLayout in order, as float counts.
struct IntValueParts {
  size_t wq, ws, wscale, wzero, whi, wlo, acc, tile_index, tile_base, chunk_index;
  size_t Total() const {
    return wq + ws + wscale + wzero + whi + wlo + acc + tile_index + tile_base + chunk_index;
  }
};

IntValueParts PartsOf(const IntValueLayout& l) {
  if (l.head_groups == 0) return {};
  const size_t sets = kQuantAttendStepRows / 4;
  return {.wq = l.group * kQuantAttendStepRows * l.wq_stride,
          .ws = l.group * kQuantAttendStepRows * l.gv_pad,
          .wscale = l.group * l.gv_pad,
          .wzero = l.group * l.gv_pad,
          .whi = l.group * sets * l.gv_pad,
          .wlo = l.group * sets * l.gv_pad,
          .acc = l.group * l.n_kv_heads * 2 * l.acc_pad,
          .tile_index = l.tiles * 16,
          .tile_base = l.tiles,
          .chunk_index = 4 * 4 * 16};
}

}  // namespace

IntValueLayout IntValueLayout::Of(size_t n_kv_heads, size_t group, size_t head_dim,
                                  uint32_t group_size, float* base) {
  IntValueLayout l{};
  l.group = group;
  l.n_kv_heads = n_kv_heads;
  l.head_dim = head_dim;
  if (group_size == 0 || head_dim % group_size != 0) return l;
  l.head_groups = head_dim / group_size;
  l.value_groups = n_kv_heads * l.head_groups;
  l.gv_pad = (l.value_groups + 15) / 16 * 16 + 16;
  l.wq_stride = n_kv_heads + 16;
  l.acc_pad = (head_dim + 127) / 128 * 128;
  l.tiles = (l.value_groups + 15) / 16;
  if (base == nullptr) return l;
  const IntValueParts parts = PartsOf(l);
  float* p = base;
  auto take = [&p](size_t n) {
    float* part = p;
    p += n;
    return part;
  };
  l.wq = take(parts.wq);
  l.ws = take(parts.ws);
  l.wscale = take(parts.wscale);
  l.wzero = take(parts.wzero);
  l.whi = reinterpret_cast<int32_t*>(take(parts.whi));
  l.wlo = reinterpret_cast<int32_t*>(take(parts.wlo));
  l.acc = reinterpret_cast<int32_t*>(take(parts.acc));
  l.tile_index = reinterpret_cast<int32_t*>(take(parts.tile_index));
  l.tile_base = reinterpret_cast<int32_t*>(take(parts.tile_base));
  l.chunk_index = reinterpret_cast<int32_t*>(take(parts.chunk_index));
  return l;
}

size_t IntValueLayout::Floats() const { return PartsOf(*this).Total(); }

}  // namespace qattn

size_t QuantAttendScratchFloats(const QuantAttendArgs& a) {
  // The SIMD layout (quant_attention_simd.h): running max, sum, run sum and key bias per head,
  // one step's scores per head, the query scaled by the current key group's scales, the value
  // scales and zero points of one row group (at most 8 rows), the per-run log-sum-exps, and the
  // value group of each vector of a row (at least 8 lanes).
  const size_t n_heads = a.n_heads;
  const size_t channels = size_t{a.n_kv_heads} * a.head_dim;
  const size_t value_groups = qattn::ValueGroups(channels, a.group_size);
  // The integer-score version adds each head's query as two int8 halves (each head_dim rounded
  // up to 128 bytes) and its scale, and the integer-weight version its tables
  // (qattn::IntValueLayout).
  const size_t query_bytes = (size_t{a.head_dim} + 127) / 128 * 128;
  const size_t int_values =
      a.n_kv_heads == 0 ? 0
                        : qattn::IntValueLayout::Of(a.n_kv_heads, a.n_heads / a.n_kv_heads,
                                                    a.head_dim, a.group_size, nullptr)
                              .Floats();
  return n_heads * (4 + kQuantAttendStepRows + a.head_dim + a.n_runs) + 2 * 8 * value_groups +
         channels / 8 + n_heads * (2 * query_bytes / sizeof(float) + 1) + int_values;
}

Result<QuantKvRun> QuantRunFromEncodedBlock(std::span<const std::byte> encoded,
                                            uint32_t n_kv_heads, uint32_t head_dim, uint32_t bits,
                                            uint32_t group_size, uint32_t rows) {
  KV_ASSIGN_OR_RETURN(const codecs::BlockHeader h, codecs::DecodeBlockHeader(encoded));
  // Only the unrotated int8/int4 layouts are attended from their codes: a rotated block's codes
  // are of rotated heads, and k8v4's halves differ in bits; those are decoded first.
  const bool plain = h.params.codec == codecs::CodecId::kInt8 ||
                     h.params.codec == codecs::CodecId::kInt4;
  if (!plain || h.params.bits() != bits || h.params.uses_zstd() ||
      h.params.group_size != group_size) {
    return Status::InvalidArgument("quantized attention: block is " + h.params.ToString() +
                                   ", not int" + std::to_string(bits) + " group " +
                                   std::to_string(group_size) + " without zstd");
  }
  if (h.geometry.kv_heads != n_kv_heads || h.geometry.head_dim != head_dim || rows == 0 ||
      rows > h.geometry.tokens) {
    return Status::InvalidArgument("quantized attention: block geometry " +
                                   h.geometry.ToString() + " does not fit " +
                                   std::to_string(rows) + " rows of the attention's heads");
  }
  if (encoded.size() < h.encoded_bytes()) {
    return Status::Corruption("quantized attention: encoded block is truncated");
  }
  return QuantKvRun{.payload = encoded.data() + codecs::kBlockHeaderBytes,
                    .block_tokens = h.geometry.tokens,
                    .rows = rows};
}

namespace ref {
namespace {

float F16At(const std::byte* base, size_t index) {
  return codecs::F16ToF32(DecodeFixed16(base + 2 * index));
}

uint32_t CodeAt(const uint8_t* codes, size_t element, uint32_t bits) {
  if (bits == 8) return codes[element];
  return (codes[element / 2] >> (4 * (element & 1))) & 0xfu;
}

// One block's dequantization, element by element, as the codecs specify it (a multiply, then an
// add; no FMA).
struct Dequantizer {
  qattn::QuantBlockView view;
  size_t channels;
  uint32_t bits;
  uint32_t group_size;

  float Key(size_t token, size_t channel) const {
    const size_t param = token / group_size * channels + channel;
    const float x = static_cast<float>(CodeAt(view.k_codes, token * channels + channel, bits)) *
                    F16At(view.k_scale, param);
    return x + F16At(view.k_zero, param);
  }
  float KeyScale(size_t key_group, size_t channel) const {
    return F16At(view.k_scale, key_group * channels + channel);
  }
  size_t ValueParam(size_t token, size_t value_group) const {
    return token * qattn::ValueGroups(channels, group_size) + value_group;
  }
  float Value(size_t token, size_t channel) const {
    const size_t param = token * qattn::ValueGroups(channels, group_size) + channel / group_size;
    const float x = static_cast<float>(CodeAt(view.v_codes, token * channels + channel, bits)) *
                    F16At(view.v_scale, param);
    return x + F16At(view.v_zero, param);
  }
};

// q . k_row with the query scaled by the row's key group's scales and quantized to 15 bits (the
// integer-score contract, quant_attention.h): an exact integer dot product of the codes with the
// integer query, scaled once, plus q . k_zero.
float Q15Score(const Dequantizer& b, size_t row, const float* q, size_t c0, size_t head_dim) {
  const size_t key_group = row / b.group_size;
  float m = 0.0f;
  for (size_t d = 0; d < head_dim; ++d) {
    m = std::max(m, std::abs(q[d] * b.KeyScale(key_group, c0 + d)));
  }
  const float inv = m > 0.0f ? 127.0f / m : 0.0f;
  int32_t dot = 0;
  float bias = 0.0f;
  for (size_t d = 0; d < head_dim; ++d) {
    const size_t c = c0 + d;
    const float qs = q[d] * b.KeyScale(key_group, c);
    const auto q15 = static_cast<int32_t>(std::nearbyint(qs * inv * 128.0f));
    dot += q15 * static_cast<int32_t>(CodeAt(b.view.k_codes, row * b.channels + c, b.bits));
    bias += q[d] * F16At(b.view.k_zero, key_group * b.channels + c);
  }
  return static_cast<float>(dot) * (m / 16256.0f) + bias;
}

// round-to-nearest-even(x), 0 where it is not a finite int32 (a corrupt scale gives NaN or wrong
// outputs, never undefined behaviour).
int32_t RoundToInt(float x) {
  const float r = std::nearbyint(x);
  return std::abs(r) < 2147483520.0f ? static_cast<int32_t>(r) : 0;
}

// The integer-weight contract (quant_attention.h, "Integer weights"): a run's rows in steps (a
// step ends at every kQuantAttendStepRows rows and at every key group boundary, as the SIMD
// versions' steps do); in each step, per value group g overlapping the head's channels, the
// weights times the group's value scales, p_r = e_r * v_scale[r][g], are quantized to 15 bits
// with one scale (m = max_r |p_r|, q_r = rne(p_r * (16256 / m)), 0 when m is 0), and the step
// adds (float(sum_r q_r * code_r[c]) * (m / 16256) + sum_r e_r * v_zero[r][g]) / sum to out[c].
// Returns the run's sum of e_r.
template <class Weight>
float Q15Values(const Dequantizer& b, size_t rows, size_t c0, size_t head_dim,
                const Weight& weight, float sum, float* out) {
  const uint32_t g_size = b.group_size;
  std::vector<float> e;
  float run_sum = 0.0f;
  size_t n = 0;
  for (size_t r0 = 0; r0 < rows; r0 += n) {
    const size_t key_group = r0 / g_size;
    n = std::min({size_t{kQuantAttendStepRows}, rows - r0, (key_group + 1) * g_size - r0});
    e.resize(n);
    for (size_t j = 0; j < n; ++j) {
      e[j] = weight(r0 + j);
      run_sum += e[j];
    }
    for (size_t vg = c0 / g_size; vg * g_size < c0 + head_dim; ++vg) {
      float m = 0.0f;
      float zero = 0.0f;
      for (size_t j = 0; j < n; ++j) {
        const size_t param = b.ValueParam(r0 + j, vg);
        m = std::max(m, std::abs(e[j] * F16At(b.view.v_scale, param)));
        zero += e[j] * F16At(b.view.v_zero, param);
      }
      const float inv = m > 0.0f ? 16256.0f / m : 0.0f;
      const size_t c_end = std::min(c0 + head_dim, (vg + 1) * g_size);
      for (size_t c = std::max(c0, vg * g_size); c < c_end; ++c) {
        int64_t dot = 0;
        for (size_t j = 0; j < n; ++j) {
          const size_t row = r0 + j;
          const int64_t q =
              RoundToInt(e[j] * F16At(b.view.v_scale, b.ValueParam(row, vg)) * inv);
          dot += q * CodeAt(b.view.v_codes, row * b.channels + c, b.bits);
        }
        out[c - c0] += (static_cast<float>(dot) * (m / 16256.0f) + zero) / sum;
      }
    }
  }
  return run_sum;
}

void Attend(const QuantAttendArgs& a, bool int8_query) {
  const size_t head_dim = a.head_dim;
  const size_t channels = size_t{a.n_kv_heads} * head_dim;
  const uint32_t group = a.n_heads / a.n_kv_heads;
  if (a.run_mass != nullptr) std::fill_n(a.run_mass, a.n_runs, 0.0f);
  for (uint32_t h = 0; h < a.n_heads; ++h) {
    const float* q = a.q + h * head_dim;
    const size_t c0 = size_t{h / group} * head_dim;
    auto blocks = [&](size_t run) {
      return Dequantizer{.view = qattn::ViewOf(a.runs[run], channels, a.bits, a.group_size),
                         .channels = channels,
                         .bits = a.bits,
                         .group_size = a.group_size};
    };
    auto score = [&](const Dequantizer& b, size_t row) {
      if (int8_query) return Q15Score(b, row, q, c0, head_dim);
      float sum = 0.0f;
      for (size_t d = 0; d < head_dim; ++d) sum += q[d] * b.Key(row, c0 + d);
      return sum;
    };
    float max_score = -INFINITY;
    float sum = 0.0f;
    for (size_t i = 0; i < a.n_runs; ++i) {
      const Dequantizer b = blocks(i);
      for (size_t j = 0; j < a.runs[i].rows; ++j) max_score = std::max(max_score, score(b, j));
    }
    for (size_t i = 0; i < a.n_runs; ++i) {
      const Dequantizer b = blocks(i);
      for (size_t j = 0; j < a.runs[i].rows; ++j) sum += std::exp(score(b, j) - max_score);
    }
    if (a.head_lse != nullptr) a.head_lse[h] = max_score + std::log(sum);
    float* out = a.out + h * head_dim;
    std::fill_n(out, head_dim, 0.0f);
    for (size_t i = 0; i < a.n_runs; ++i) {
      const Dequantizer b = blocks(i);
      float run_sum = 0.0f;
      if (int8_query) {
        run_sum = Q15Values(b, a.runs[i].rows, c0, head_dim,
                            [&](size_t row) { return std::exp(score(b, row) - max_score); },
                            sum, out);
      } else {
        for (size_t j = 0; j < a.runs[i].rows; ++j) {
          const float e = std::exp(score(b, j) - max_score);
          for (size_t d = 0; d < head_dim; ++d) out[d] += e / sum * b.Value(j, c0 + d);
          run_sum += e;
        }
      }
      if (a.run_mass != nullptr) a.run_mass[i] += run_sum / sum / static_cast<float>(a.n_heads);
      if (a.run_lse != nullptr) a.run_lse[i * a.n_heads + h] = max_score + std::log(run_sum);
    }
  }
}

}  // namespace

void AttendQuant(const QuantAttendArgs& a) { Attend(a, false); }
void AttendQuantQ15(const QuantAttendArgs& a) { Attend(a, true); }

}  // namespace ref

namespace {

constexpr QuantAttentionKernels kScalarQuantKernels = {.isa = QuantKernelIsa::kScalar,
                                                       .attend_quant = ref::AttendQuant,
                                                       .reference = ref::AttendQuant};
#if defined(__x86_64__)
constexpr QuantAttentionKernels kAvx2QuantKernels = {.isa = QuantKernelIsa::kAvx2,
                                                     .attend_quant = avx2::AttendQuant,
                                                     .reference = ref::AttendQuant};
constexpr QuantAttentionKernels kAvx512QuantKernels = {.isa = QuantKernelIsa::kAvx512,
                                                       .attend_quant = avx512::AttendQuant,
                                                       .reference = ref::AttendQuant};
constexpr QuantAttentionKernels kAvx512VnniQuantKernels = {
    .isa = QuantKernelIsa::kAvx512Vnni,
    .attend_quant = avx512vnni::AttendQuant,
    .reference = ref::AttendQuantQ15};
#endif

bool DetectAvx512F() {
#if defined(__x86_64__)
  if (!CpuHasAvx2F16c()) return false;  // Also checked OSXSAVE and the YMM state.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  if ((ebx & bit_AVX512F) == 0) return false;
  // The OS must save the opmask and ZMM registers too (XCR0 bits 5, 6 and 7).
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  return (xcr0_lo & 0xe6u) == 0xe6u;
#else
  return false;
#endif
}

bool DetectAvx512Vnni() {
#if defined(__x86_64__)
  if (!CpuHasAvx512F()) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ebx & bit_AVX512BW) != 0 && (ebx & bit_AVX512VL) != 0 &&
         (ecx & bit_AVX512VNNI) != 0 && (ecx & bit_AVX512VBMI) != 0;
#else
  return false;
#endif
}

}  // namespace

bool CpuHasAvx512F() {
  static const bool has = DetectAvx512F();
  return has;
}

bool CpuHasAvx512Vnni() {
  static const bool has = DetectAvx512Vnni();
  return has;
}

const QuantAttentionKernels& GetQuantAttentionKernels(QuantKernelIsa isa) {
#if defined(__x86_64__)
  if ((isa == QuantKernelIsa::kAuto || isa == QuantKernelIsa::kAvx512Vnni) &&
      CpuHasAvx512Vnni()) {
    return kAvx512VnniQuantKernels;
  }
  if ((isa == QuantKernelIsa::kAuto || isa == QuantKernelIsa::kAvx512 ||
       isa == QuantKernelIsa::kAvx512Vnni) &&
      CpuHasAvx512F()) {
    return kAvx512QuantKernels;
  }
  if (isa != QuantKernelIsa::kScalar && CpuHasAvx2F16c()) return kAvx2QuantKernels;
#else
  (void)isa;
#endif
  return kScalarQuantKernels;
}

}  // namespace kvtier::runtime
