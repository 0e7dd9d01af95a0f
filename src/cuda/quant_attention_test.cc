// Goal: the GPU's attention over INT8/INT4 blocks read in place (AttendQuantRuns,
// quant_attention_kernels.cu) computes what the CPU's reference computes (runtime's
// ref::AttendQuant: each code dequantized as code * scale + zero in float, three passes), for
// MHA and GQA, head_dim not a multiple of 16, partial runs and blocks of two sizes; and refuses
// bad arguments before anything is queued.
// Method: seeded random FP16 blocks (N(0, 1), every 8th key channel 10x larger with an offset)
// are encoded by the CPU codec (codecs::EncodeBlock, the bytes a tier holds); the runs are the
// payloads after the headers (runtime's QuantRunFromEncodedBlock). Outputs must agree within
// 1e-4 of 1 + |out| (float sums in another order), log-sum-exps within 1e-4 of 1 + |lse| and run
// masses within 1e-5:
//   (a) on the host: the kernels' bodies (quant_attention_math.h) run over every index by
//       QuantAttendHost, with the plan AttendQuantRuns would launch (PlanQuantAttend), so the
//       arithmetic and layout the GPU runs are checked without a GPU;
//   (b) on the GPU: AttendQuantRuns on device copies; skips with the reason when no GPU is
//       usable (tests/cuda/device_checks.sh counts a skip as a failure on a GPU machine);
//   (c) argument errors: InvalidArgument from AttendQuantRuns with a null stream and no GPU,
//       among them a scratch one byte short, a misaligned scratch and an odd payload address.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "codecs/codec.h"
#include "codecs/codec_params.h"
#include "core/assert.h"
#include "cuda/cuda_buffer.h"
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_status.h"
#include "cuda/quant_attention_math.h"
#include "runtime/kernels.h"
#include "runtime/quant_attention.h"

namespace kvtier::cuda {
namespace {

struct Shape {
  uint32_t n_heads;
  uint32_t n_kv_heads;
  uint32_t head_dim;
  uint32_t group_size;
  std::vector<uint32_t> block_tokens;  // Per run.
  std::vector<uint32_t> rows;          // Per run.
};

const Shape kShapes[] = {
    // MHA, head_dim 64, a partial last run.
    {.n_heads = 4, .n_kv_heads = 4, .head_dim = 64, .group_size = 32,
     .block_tokens = {32, 32, 32}, .rows = {32, 32, 17}},
    // GQA (4 query heads per KV head), head_dim 40, group 16, blocks of 48 and 32 tokens.
    {.n_heads = 8, .n_kv_heads = 2, .head_dim = 40, .group_size = 16,
     .block_tokens = {48, 32, 48}, .rows = {48, 32, 5}},
};

struct Case {
  std::vector<std::vector<std::byte>> encoded;  // Whole encoded blocks.
  std::vector<runtime::QuantKvRun> runs;        // Into `encoded`.
  std::vector<float> q;
};

Case MakeCase(const Shape& s, uint32_t bits, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const codecs::CodecParams params = bits == 8 ? codecs::CodecParams::Int8(s.group_size)
                                               : codecs::CodecParams::Int4(s.group_size);
  Result<codecs::CodecContext> ctx = codecs::CodecContext::Create();
  KV_CHECK(ctx.ok());
  const size_t channels = size_t{s.n_kv_heads} * s.head_dim;
  Case c;
  for (size_t i = 0; i < s.rows.size(); ++i) {
    const codecs::BlockGeometry g{
        .tokens = s.block_tokens[i], .kv_heads = s.n_kv_heads, .head_dim = s.head_dim};
    std::vector<float> f(2 * size_t{s.block_tokens[i]} * channels);
    for (size_t t = 0; t < s.block_tokens[i]; ++t) {
      for (size_t ch = 0; ch < channels; ++ch) {
        const bool outlier = ch % 8 == 3;
        f[t * channels + ch] = outlier ? 4.0f + 10.0f * normal(rng) : normal(rng);
        f[(s.block_tokens[i] + t) * channels + ch] = 0.5f * normal(rng);
      }
    }
    std::vector<uint16_t> raw(f.size());
    runtime::ref::FloatToHalfN(f.data(), f.size(), raw.data());
    std::vector<std::byte> encoded(*codecs::MaxEncodedSize(params, g));
    Result<size_t> size =
        codecs::EncodeBlock(params, g, std::as_bytes(std::span(raw)), encoded, &*ctx);
    KV_CHECK(size.ok());
    encoded.resize(*size);
    c.encoded.push_back(std::move(encoded));
  }
  for (size_t i = 0; i < s.rows.size(); ++i) {
    Result<runtime::QuantKvRun> run = runtime::QuantRunFromEncodedBlock(
        c.encoded[i], s.n_kv_heads, s.head_dim, bits, s.group_size, s.rows[i]);
    KV_CHECK(run.ok());
    c.runs.push_back(*run);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  c.q.resize(size_t{s.n_heads} * s.head_dim);
  for (float& x : c.q) x = scale * normal(rng);
  return c;
}

struct Outputs {
  std::vector<float> out, run_mass, head_lse, run_lse;

  explicit Outputs(const Shape& s)
      : out(size_t{s.n_heads} * s.head_dim),
        run_mass(s.rows.size()),
        head_lse(s.n_heads),
        run_lse(s.rows.size() * s.n_heads) {}
};

Outputs Reference(const Shape& s, uint32_t bits, const Case& c) {
  Outputs o(s);
  runtime::QuantAttendArgs args{.n_heads = s.n_heads, .n_kv_heads = s.n_kv_heads,
                                .head_dim = s.head_dim, .bits = bits,
                                .group_size = s.group_size, .q = c.q.data(),
                                .runs = c.runs.data(), .n_runs = c.runs.size(),
                                .out = o.out.data(), .run_mass = o.run_mass.data(),
                                .head_lse = o.head_lse.data(), .run_lse = o.run_lse.data()};
  std::vector<float> scratch(runtime::QuantAttendScratchFloats(args));
  args.scratch = scratch.data();
  runtime::ref::AttendQuant(args);
  return o;
}

void ExpectClose(const Outputs& got, const Outputs& want) {
  for (size_t i = 0; i < want.out.size(); ++i) {
    ASSERT_NEAR(got.out[i], want.out[i], 1e-4 * (1.0 + std::fabs(want.out[i]))) << "out " << i;
  }
  for (size_t h = 0; h < want.head_lse.size(); ++h) {
    ASSERT_NEAR(got.head_lse[h], want.head_lse[h], 1e-4 * (1.0 + std::fabs(want.head_lse[h])))
        << "head_lse " << h;
  }
  for (size_t i = 0; i < want.run_lse.size(); ++i) {
    ASSERT_NEAR(got.run_lse[i], want.run_lse[i], 1e-4 * (1.0 + std::fabs(want.run_lse[i])))
        << "run_lse " << i;
  }
  double mass = 0.0;
  for (size_t i = 0; i < want.run_mass.size(); ++i) {
    ASSERT_NEAR(got.run_mass[i], want.run_mass[i], 1e-5) << "run_mass " << i;
    mass += got.run_mass[i];
  }
  EXPECT_NEAR(mass, 1.0, 1e-5);
}

QuantAttendBatch BatchOf(const Shape& s, uint32_t bits, const float* q,
                         std::span<const QuantAttendRunRef> runs) {
  return {.n_heads = s.n_heads, .n_kv_heads = s.n_kv_heads, .head_dim = s.head_dim,
          .bits = bits, .group_size = s.group_size, .q = q, .runs = runs};
}

TEST(CudaQuantAttentionTest, KernelBodiesOnTheHostMatchTheCpuReference) {
  for (const Shape& s : kShapes) {
    for (const uint32_t bits : {8u, 4u}) {
      SCOPED_TRACE(::testing::Message() << "n_heads=" << s.n_heads << " n_kv_heads="
                                        << s.n_kv_heads << " bits=" << bits);
      const Case c = MakeCase(s, bits, 1000 + bits);
      std::vector<QuantAttendRunRef> refs;
      for (const runtime::QuantKvRun& r : c.runs) {
        refs.push_back({.payload = r.payload, .block_tokens = r.block_tokens, .rows = r.rows});
      }
      Outputs got(s);
      QuantAttendBatch b = BatchOf(s, bits, c.q.data(), refs);
      b.out = got.out.data();
      b.run_mass = got.run_mass.data();
      b.head_lse = got.head_lse.data();
      b.run_lse = got.run_lse.data();
      std::vector<uint64_t> scratch((QuantAttendScratchBytes(b) + 7) / 8);
      b.scratch = reinterpret_cast<std::byte*>(scratch.data());
      b.scratch_bytes = scratch.size() * 8;
      Result<internal::QuantAttendPlan> plan = internal::PlanQuantAttend(b);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      std::memcpy(b.scratch, plan->runs.data(), plan->runs.size() * sizeof(plan->runs[0]));
      internal::QuantAttendHost(plan->launch);
      ExpectClose(got, Reference(s, bits, c));

      // Without the optional outputs, the log-sum-exps go to the scratch and out is the same.
      Outputs bare(s);
      b.out = bare.out.data();
      b.run_mass = b.head_lse = b.run_lse = nullptr;
      plan = internal::PlanQuantAttend(b);
      ASSERT_TRUE(plan.ok());
      std::memcpy(b.scratch, plan->runs.data(), plan->runs.size() * sizeof(plan->runs[0]));
      internal::QuantAttendHost(plan->launch);
      EXPECT_EQ(bare.out, got.out);
    }
  }
}

DeviceBuffer UploadBytes(const void* data, size_t bytes) {
  Result<DeviceBuffer> d = DeviceBuffer::Allocate(bytes);
  KV_CHECK(d.ok());
  KV_CHECK(cudaMemcpy(d->data(), data, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  return std::move(*d);
}

std::vector<float> DownloadFloats(const DeviceBuffer& d, size_t n) {
  std::vector<float> host(n);
  KV_CHECK(cudaMemcpy(host.data(), d.data(), n * sizeof(float), cudaMemcpyDeviceToHost) ==
           cudaSuccess);
  return host;
}

TEST(CudaQuantAttentionTest, GpuMatchesTheCpuReference) {
  const Result<int> devices = CudaDeviceCount();
  if (!devices.ok()) GTEST_SKIP() << "no usable CUDA GPU: " << devices.status().ToString();
  for (const Shape& s : kShapes) {
    for (const uint32_t bits : {8u, 4u}) {
      SCOPED_TRACE(::testing::Message() << "n_heads=" << s.n_heads << " n_kv_heads="
                                        << s.n_kv_heads << " bits=" << bits);
      const Case c = MakeCase(s, bits, 2000 + bits);
      std::vector<DeviceBuffer> blocks;
      std::vector<QuantAttendRunRef> refs;
      for (size_t i = 0; i < c.runs.size(); ++i) {
        blocks.push_back(UploadBytes(c.encoded[i].data(), c.encoded[i].size()));
        const size_t header = static_cast<size_t>(c.runs[i].payload - c.encoded[i].data());
        refs.push_back({.payload = blocks.back().data() + header,
                        .block_tokens = c.runs[i].block_tokens, .rows = c.runs[i].rows});
      }
      const DeviceBuffer q = UploadBytes(c.q.data(), c.q.size() * sizeof(float));
      const Outputs want = Reference(s, bits, c);
      Outputs sizes(s);
      Result<DeviceBuffer> out = DeviceBuffer::Allocate(sizes.out.size() * sizeof(float));
      Result<DeviceBuffer> mass = DeviceBuffer::Allocate(sizes.run_mass.size() * sizeof(float));
      Result<DeviceBuffer> hl = DeviceBuffer::Allocate(sizes.head_lse.size() * sizeof(float));
      Result<DeviceBuffer> rl = DeviceBuffer::Allocate(sizes.run_lse.size() * sizeof(float));
      ASSERT_TRUE(out.ok() && mass.ok() && hl.ok() && rl.ok());
      QuantAttendBatch b = BatchOf(s, bits, reinterpret_cast<const float*>(q.data()), refs);
      b.out = reinterpret_cast<float*>(out->data());
      b.run_mass = reinterpret_cast<float*>(mass->data());
      b.head_lse = reinterpret_cast<float*>(hl->data());
      b.run_lse = reinterpret_cast<float*>(rl->data());
      b.scratch_bytes = QuantAttendScratchBytes(b);
      Result<DeviceBuffer> scratch = DeviceBuffer::Allocate(b.scratch_bytes);
      ASSERT_TRUE(scratch.ok());
      b.scratch = scratch->data();
      ASSERT_TRUE(AttendQuantRuns(b, nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      Outputs got(s);
      got.out = DownloadFloats(*out, got.out.size());
      got.run_mass = DownloadFloats(*mass, got.run_mass.size());
      got.head_lse = DownloadFloats(*hl, got.head_lse.size());
      got.run_lse = DownloadFloats(*rl, got.run_lse.size());
      ExpectClose(got, want);
    }
  }
}

TEST(CudaQuantAttentionTest, ArgumentErrorsAreRefusedBeforeLaunch) {
  const Shape& s = kShapes[0];
  const Case c = MakeCase(s, 8, 3000);
  std::vector<QuantAttendRunRef> refs;
  for (const runtime::QuantKvRun& r : c.runs) {
    refs.push_back({.payload = r.payload, .block_tokens = r.block_tokens, .rows = r.rows});
  }
  std::vector<float> out(size_t{s.n_heads} * s.head_dim);
  std::vector<uint64_t> scratch;
  const QuantAttendBatch good = [&] {
    QuantAttendBatch b = BatchOf(s, 8, c.q.data(), refs);
    b.out = out.data();
    scratch.resize((QuantAttendScratchBytes(b) + 7) / 8);
    b.scratch = reinterpret_cast<std::byte*>(scratch.data());
    b.scratch_bytes = scratch.size() * 8;
    return b;
  }();
  ASSERT_TRUE(internal::PlanQuantAttend(good).ok());
  // Refused as InvalidArgument with a message that names the problem (`what` in it).
  auto refused = [&](QuantAttendBatch b, const char* what) {
    const Status st = AttendQuantRuns(b, nullptr);
    EXPECT_TRUE(st.IsInvalidArgument()) << what << ": " << st.ToString();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.ToString();
  };
  QuantAttendBatch b = good;
  b.n_kv_heads = 3;  // 4 query heads are not a multiple of 3.
  refused(b, "not a positive multiple of n_kv_heads");
  b = good;
  b.n_heads = 0;
  refused(b, "n_heads 0");
  b = good;
  b.bits = 2;
  refused(b, "bits must be 8 or 4");
  b = good;
  b.group_size = 4;
  refused(b, "group_size 4 out of range");
  b = good;
  b.q = nullptr;
  refused(b, "null q, out or scratch");
  b = good;
  b.scratch = nullptr;
  refused(b, "null q, out or scratch");
  b = good;
  b.scratch_bytes = QuantAttendScratchBytes(good) - 1;
  refused(b, "needed (QuantAttendScratchBytes)");
  b = good;
  b.scratch += 4;  // Its size stays large enough: only the alignment is wrong.
  refused(b, "not 8-byte aligned");
  b = good;
  b.runs = {};
  refused(b, "no runs");
  std::vector<QuantAttendRunRef> bad = refs;
  bad[1].rows = bad[1].block_tokens + 1;
  b = good;
  b.runs = bad;
  refused(b, "run 1 has rows 33 outside 1..32");
  bad = refs;
  bad[2].rows = 0;
  b.runs = bad;
  refused(b, "run 2 has rows 0");
  bad = refs;
  bad[0].payload = nullptr;
  b.runs = bad;
  refused(b, "run 0 has a null or odd payload address");
  bad = refs;
  bad[1].payload += 1;
  b.runs = bad;
  refused(b, "run 1 has a null or odd payload address");
  bad = refs;
  bad[0].block_tokens = 0;
  b.runs = bad;
  refused(b, "run 0: block tokens out of range");
  b = good;
  b.bits = 4;
  b.n_heads = b.n_kv_heads = 1;
  b.head_dim = 33;  // One KV head of 33 channels: odd, which INT4 does not take.
  refused(b, "INT4 needs an even n_kv_heads * head_dim");
}

}  // namespace
}  // namespace kvtier::cuda
