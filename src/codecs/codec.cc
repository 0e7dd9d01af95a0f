#include "codecs/codec.h"

// For ZSTD_c_stableInBuffer, in the library since zstd 1.4.4.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "codecs/entropy_quant.h"
#include "codecs/quantize.h"
#include "core/assert.h"

namespace kvtier::codecs {

// ---------------------------------------------------------------------------------------------
// CodecContext

void CodecContext::CCtxDeleter::operator()(ZSTD_CCtx_s* c) const { ZSTD_freeCCtx(c); }
void CodecContext::DCtxDeleter::operator()(ZSTD_DCtx_s* d) const { ZSTD_freeDCtx(d); }

CodecContext::CodecContext(CodecContext&&) noexcept = default;
CodecContext& CodecContext::operator=(CodecContext&&) noexcept = default;
CodecContext::~CodecContext() = default;

Result<CodecContext> CodecContext::Create(const CodecContextOptions& options) {
  CodecContext ctx;
  ctx.kernels_ = &GetKernels(options.isa);
  ctx.cctx_.reset(ZSTD_createCCtx());
  ctx.dctx_.reset(ZSTD_createDCtx());
  if (ctx.cctx_ == nullptr || ctx.dctx_ == nullptr) {
    return Status::NoSpace("codec context: zstd could not allocate its contexts");
  }
  return ctx;
}

Status CodecContext::Reserve(const BlockGeometry& geometry) {
  KV_RETURN_IF_ERROR(geometry.Validate());
  const size_t n = geometry.half_elements();
  // The smallest group size gives the largest quantized stage payload.
  const size_t quant_bytes = ComputeQuantLayout(geometry, 8, kQuantGroupSizeMin).total_bytes;
  F32Scratch(n);
  ParamScratch(
      std::max(QuantizeParamFloats(geometry), kEcqParamFloatsPerChannel * geometry.channels()));
  CodeScratch(n);
  Staging(std::max({geometry.raw_bytes(), quant_bytes, ComputeEcqLayout(geometry).max_bytes}));
  return Status::Ok();
}

namespace {
template <typename T>
T* Grow(std::vector<T>* v, size_t n) {
  if (v->size() < n) v->resize(n);
  return v->data();
}
}  // namespace

float* CodecContext::F32Scratch(size_t n) { return Grow(&f32_, n); }
float* CodecContext::ParamScratch(size_t n) { return Grow(&params_, n); }
uint8_t* CodecContext::CodeScratch(size_t n) { return Grow(&codes_, n); }
std::byte* CodecContext::Staging(size_t n) { return Grow(&staging_, n); }

// ---------------------------------------------------------------------------------------------
// Encoding

namespace {

bool AlignedFor(const std::byte* p, DType dtype) {
  return reinterpret_cast<uintptr_t>(p) % DTypeBytes(dtype) == 0;
}

// The smallest code plane of a quantized stage that gets zstd segments of its own.
constexpr size_t kQuantSegmentBytesMin = 32 * 1024;

// zstd's parameters for the byte planes of a BF16 block at level 1 (shuffle-zstd's default):
// the fast strategy, matches of at least 7 bytes looked for with an acceleration of 64 (zstd's
// targetLength for that strategy: the step between the positions it tries grows that much
// faster), literals always Huffman-coded. A BF16 value's high byte is its sign and 7 exponent
// bits, a plane of few byte values, where zstd's own level 1 finds short matches whose sequences
// cost more than the literals they replace. Measured on 64 blocks of 32 tokens x 4 heads x 64
// (`BM_EncodeSmallBf16/0`, `BM_DecodeSmallBf16/0`): 1.489x against 1.451x, encoded in 0.31x and
// decoded in 0.60x the time. Not for FP16, whose high byte holds two mantissa bits: on the
// model's 8 KiB FP16 blocks the same parameters lost 1.9 % (1.138x against 1.160x), and the
// quantized codes lost 0.1-1.5 %. The frames are standard; decoding does not know.
constexpr int kZstdLiteralsMinMatch = 7;
constexpr int kZstdLiteralsAcceleration = 64;

// Best effort: a zstd that refuses one of these (literalCompressionMode is in its experimental
// API) keeps its own level-1 parameters, whose frames are as valid.
void SetLiteralsFirst(ZSTD_CCtx_s* c) {
  if (ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_literalCompressionMode, ZSTD_ps_enable))) {
    return;
  }
  if (ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_strategy, ZSTD_fast)) ||
      ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_minMatch, kZstdLiteralsMinMatch)) ||
      ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_targetLength, kZstdLiteralsAcceleration))) {
    ZSTD_CCtx_setParameter(c, ZSTD_c_literalCompressionMode, ZSTD_ps_auto);
  }
}

// Compresses `src` as one zstd frame (with its content size) whose blocks end at each of
// `ends` (ascending offsets into `src`, the last == src.size()): each segment gets its own
// literals table, or none where its bytes do not compress. The planes of a block are not alike
// (a 16-bit value's high byte holds its exponent, its low byte near-random mantissa bits; keys
// and values have their own scales): one table over them all made the real model's 8 KiB blocks
// 9 % larger (1.059x against 1.160x). The frame is standard: the decoder does not know the
// segments. `literals_first` at level 1: SetLiteralsFirst's parameters.
Status ZstdCompressSegments(CodecContext* ctx, int level, std::span<const std::byte> src,
                            std::span<const size_t> ends, std::span<std::byte> dst, size_t* written,
                            bool literals_first = false) {
  ZSTD_CCtx_s* c = ctx->cctx();
  auto failed = [](size_t r) {
    return Status::Aborted(std::string("zstd compression failed: ") + ZSTD_getErrorName(r));
  };
  KV_CHECK(!ends.empty() && ends.back() == src.size());
  size_t r = ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
  if (ZSTD_isError(r)) return failed(r);
  if (literals_first && level == 1) SetLiteralsFirst(c);
  if (ends.size() == 1) {
    r = ZSTD_compress2(c, dst.data(), dst.size(), src.data(), src.size());
    if (ZSTD_isError(r)) return failed(r);
    *written = r;
    return Status::Ok();
  }
  // The input stays where it is between the calls (only its size grows): zstd reads it in
  // place instead of copying it into its own window buffer.
  r = ZSTD_CCtx_setParameter(c, ZSTD_c_stableInBuffer, 1);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setPledgedSrcSize(c, src.size());
  if (ZSTD_isError(r)) return failed(r);
  ZSTD_outBuffer out{dst.data(), dst.size(), 0};
  ZSTD_inBuffer in{src.data(), 0, 0};
  for (size_t i = 0; i < ends.size(); ++i) {
    KV_CHECK(ends[i] >= in.size && ends[i] <= src.size());
    in.size = ends[i];
    const ZSTD_EndDirective mode = i + 1 == ends.size() ? ZSTD_e_end : ZSTD_e_flush;
    // Within ZSTD_compressBound(src.size()) a flush or the end completes in one call: more
    // than one round means the output is full, which the bound rules out.
    r = ZSTD_compressStream2(c, &out, &in, mode);
    if (ZSTD_isError(r)) return failed(r);
    if (r != 0 || in.pos != in.size) {
      return Status::Aborted("zstd compression: the frame did not fit its bound");
    }
  }
  *written = out.pos;
  return Status::Ok();
}

// Shuffles `raw` into byte planes (2 for 16-bit dtypes, 4 for F32) in `dst`.
void ShufflePlanes(const Kernels& k, DType dtype, std::span<const std::byte> raw, std::byte* dst) {
  const auto* src = reinterpret_cast<const uint8_t*>(raw.data());
  auto* out = reinterpret_cast<uint8_t*>(dst);
  if (DTypeBytes(dtype) == 2) {
    k.shuffle16(src, raw.size() / 2, out);
  } else {
    k.shuffle32(src, raw.size() / 4, out);
  }
}

void UnshufflePlanes(const Kernels& k, DType dtype, const std::byte* planes,
                     std::span<std::byte> out) {
  const auto* src = reinterpret_cast<const uint8_t*>(planes);
  auto* dst = reinterpret_cast<uint8_t*>(out.data());
  if (DTypeBytes(dtype) == 2) {
    k.unshuffle16(src, out.size() / 2, dst);
  } else {
    k.unshuffle32(src, out.size() / 4, dst);
  }
}

// Writes the payload for `params` into `payload` (MaxPayloadBytes long); sets its size.
Status EncodePayload(const CodecParams& params, const BlockGeometry& g,
                     std::span<const std::byte> raw, std::span<std::byte> payload,
                     CodecContext* ctx, size_t* payload_bytes) {
  const size_t stage_bytes = StagePayloadBytes(params, g);
  switch (params.codec) {
    case CodecId::kIdentity:
      std::memcpy(payload.data(), raw.data(), raw.size());
      *payload_bytes = raw.size();
      return Status::Ok();
    case CodecId::kShuffleZstd: {
      std::byte* planes = ctx->Staging(stage_bytes);
      ShufflePlanes(ctx->kernels(), g.dtype, raw, planes);
      // Byte plane b holds byte b of every element, the keys' then the values': a segment per
      // byte and K/V plane (4 for FP16 and BF16, 8 for FP32; half as many for a latent block).
      std::array<size_t, 8> ends{};
      const size_t segments = DTypeBytes(g.dtype) * g.planes();
      for (size_t i = 0; i < segments; ++i) ends[i] = (i + 1) * g.half_elements();
      return ZstdCompressSegments(ctx, params.zstd_level, {planes, stage_bytes},
                                  std::span(ends).first(segments), payload, payload_bytes,
                                  /*literals_first=*/g.dtype == DType::kBF16);
    }
    case CodecId::kInt8:
    case CodecId::kInt4:
    case CodecId::kInt8Rot:
    case CodecId::kInt4Rot:
    case CodecId::kK8V4:
    case CodecId::kK8V4Rot: {
      const QuantScheme scheme = SchemeOf(params.codec);
      if (!params.uses_zstd()) {
        *payload_bytes = stage_bytes;
        return QuantizeBlock(g, scheme, params.group_size, raw, payload.first(stage_bytes), ctx);
      }
      std::span<std::byte> stage(ctx->Staging(stage_bytes), stage_bytes);
      KV_RETURN_IF_ERROR(QuantizeBlock(g, scheme, params.group_size, raw, stage, ctx));
      // A segment for the scales and zero points, one for the key codes, one for the values',
      // when the codes are large enough to pay for the extra zstd blocks: on the model's 8 KiB
      // blocks the segments saved 0.2 % and cost 40 % of the encode rate; on 1 MiB blocks they
      // saved 0.8-1.7 % at the same rate.
      const QuantLayout l =
          ComputeQuantLayout(g, scheme.key_bits, scheme.value_bits, params.group_size);
      std::array<size_t, 3> ends{l.k_codes_offset, l.v_codes_offset, stage_bytes};
      size_t segments = 3;
      if (l.code_bytes < kQuantSegmentBytesMin) {
        ends[0] = stage_bytes;
        segments = 1;
      } else if (g.planes() == 1) {
        ends[1] = stage_bytes;
        segments = 2;
      }
      return ZstdCompressSegments(ctx, params.zstd_level, stage, std::span(ends).first(segments),
                                  payload, payload_bytes);
    }
    case CodecId::kEcq5:
    case CodecId::kEcq6:
    case CodecId::kEcq6V5: {
      std::span<std::byte> stage(ctx->Staging(stage_bytes), stage_bytes);
      size_t used = 0;
      KV_RETURN_IF_ERROR(EcqQuantize(g, EcqPrecisionOf(params.codec), raw, stage, &used, ctx));
      // One segment: the centers, codes and escapes share one table (separate tables for the
      // escapes, or for the keys' and values' codes, measured no smaller on the model's blocks).
      const std::array<size_t, 1> ends{used};
      return ZstdCompressSegments(ctx, params.zstd_level, stage.first(used), ends, payload,
                                  payload_bytes);
    }
  }
  return Status::InvalidArgument("unknown codec: " + params.ToString());
}

}  // namespace

Result<size_t> MaxEncodedSize(const CodecParams& params, const BlockGeometry& geometry) {
  KV_RETURN_IF_ERROR(params.Validate());
  KV_RETURN_IF_ERROR(geometry.Validate());
  if (geometry.kind == LayoutKind::kLatent && !LatentCodecOk(params)) {
    return Status::InvalidArgument(
        CodecName(params.codec) +
        " splits or rotates K and V; a latent block (one plane, no K/V split) takes identity, "
        "shuffle-zstd, int8, int4, ecq5 or ecq6");  // ecq6v5 has two precisions, as k8v4
  }
  if (params.rotated() && !std::has_single_bit(geometry.head_dim)) {
    return Status::InvalidArgument(CodecName(params.codec) +
                                   " rotates each value head with a Hadamard transform, which "
                                   "needs a power-of-two head_dim, not " +
                                   std::to_string(geometry.head_dim));
  }
  return kBlockHeaderBytes + MaxPayloadBytes(params, geometry);
}

Result<size_t> MaxEncodedSizeAnyCodec(const BlockGeometry& geometry) {
  KV_RETURN_IF_ERROR(geometry.Validate());
  // The smallest quantization group has the most scale/zero parameters, and a zstd frame's bound
  // exceeds its input; the zstd level does not change the bound, nor does the rotation (the
  // rotated codecs' sizes are their unrotated twins'). Keep in step with CodecId.
  std::vector<CodecParams> worst = {CodecParams::Identity(), CodecParams::ShuffleZstd(),
                                    CodecParams::Ecq(CodecId::kEcq5)};
  for (uint8_t v = 1; v <= static_cast<uint8_t>(kCodecIdLast); ++v) {
    const auto id = static_cast<CodecId>(v);
    if (SchemeOf(id).key_bits == 0 || SchemeOf(id).rotated || SchemeOf(id).entropy_coded) {
      continue;
    }
    if (geometry.kind == LayoutKind::kLatent &&
        !LatentCodecOk(CodecParams::Quantized(id, kQuantGroupSizeMin, 0))) {
      continue;
    }
    worst.push_back(CodecParams::Quantized(id, kQuantGroupSizeMin, 0));
    worst.push_back(CodecParams::Quantized(id, kQuantGroupSizeMin, kZstdLevelMin));
  }
  size_t max_bytes = 0;
  for (const CodecParams& params : worst) {
    KV_ASSIGN_OR_RETURN(const size_t bytes, MaxEncodedSize(params, geometry));
    max_bytes = std::max(max_bytes, bytes);
  }
  return max_bytes;
}

Result<size_t> EncodeBlock(const CodecParams& params, const BlockGeometry& geometry,
                           std::span<const std::byte> raw, std::span<std::byte> out,
                           CodecContext* ctx) {
  KV_ASSIGN_OR_RETURN(const size_t max_bytes, MaxEncodedSize(params, geometry));
  if (raw.size() != geometry.raw_bytes()) {
    return Status::InvalidArgument("encode: raw block is " + std::to_string(raw.size()) +
                                   " bytes, geometry " + geometry.ToString() + " needs " +
                                   std::to_string(geometry.raw_bytes()));
  }
  if (!AlignedFor(raw.data(), geometry.dtype)) {
    return Status::InvalidArgument("encode: raw block not aligned to its element size");
  }
  if (out.size() < max_bytes) {
    return Status::InvalidArgument("encode: output buffer of " + std::to_string(out.size()) +
                                   " bytes is below MaxEncodedSize " + std::to_string(max_bytes));
  }
  size_t payload_bytes = 0;
  KV_RETURN_IF_ERROR(EncodePayload(params, geometry, raw,
                                   out.subspan(kBlockHeaderBytes, max_bytes - kBlockHeaderBytes),
                                   ctx, &payload_bytes));
  const BlockHeader header{.params = params,
                           .geometry = geometry,
                           .raw_bytes = geometry.raw_bytes(),
                           .payload_bytes = payload_bytes};
  EncodeBlockHeader(header, out.first<kBlockHeaderBytes>());
  KV_DCHECK(DecodeBlockHeader(out.first(kBlockHeaderBytes)).ok());
  return header.encoded_bytes();
}

// ---------------------------------------------------------------------------------------------
// Decoding

namespace {

// Decompresses exactly one zstd frame of exactly `src.size()` bytes into exactly `dst.size()`.
Status ZstdDecompressExact(CodecContext* ctx, std::span<const std::byte> src,
                           std::span<std::byte> dst) {
  const unsigned long long content = ZSTD_getFrameContentSize(src.data(), src.size());
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN) {
    return Status::Corruption("encoded block: payload is not a zstd frame with a content size");
  }
  if (content != dst.size()) {
    return Status::Corruption("encoded block: zstd content size " + std::to_string(content) +
                              " != expected " + std::to_string(dst.size()));
  }
  const size_t frame = ZSTD_findFrameCompressedSize(src.data(), src.size());
  if (ZSTD_isError(frame) || frame != src.size()) {
    return Status::Corruption("encoded block: zstd frame does not span the payload exactly");
  }
  const size_t r = ZSTD_decompressDCtx(ctx->dctx(), dst.data(), dst.size(), src.data(), src.size());
  if (ZSTD_isError(r)) {
    return Status::Corruption(std::string("encoded block: zstd: ") + ZSTD_getErrorName(r));
  }
  if (r != dst.size()) return Status::Corruption("encoded block: zstd output is short");
  return Status::Ok();
}

// The ecq codecs: one zstd frame of a stage whose size the frame states, at most the layout's
// bound.
Status DecodeEcqPayload(const BlockGeometry& g, std::span<const std::byte> payload,
                        std::span<std::byte> out, CodecContext* ctx) {
  const EcqLayout l = ComputeEcqLayout(g);
  const unsigned long long content = ZSTD_getFrameContentSize(payload.data(), payload.size());
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN) {
    return Status::Corruption("encoded block: payload is not a zstd frame with a content size");
  }
  if (content > l.max_bytes) {
    return Status::Corruption("encoded block: ecq stage of " + std::to_string(content) +
                              " bytes exceeds its bound " + std::to_string(l.max_bytes));
  }
  std::span<std::byte> stage(ctx->Staging(content), content);
  KV_RETURN_IF_ERROR(ZstdDecompressExact(ctx, payload, stage));
  return EcqDequantize(g, stage, out, ctx);
}

Status DecodePayload(const BlockHeader& h, std::span<const std::byte> payload,
                     std::span<std::byte> out, CodecContext* ctx) {
  const BlockGeometry& g = h.geometry;
  if (h.params.entropy_coded()) return DecodeEcqPayload(g, payload, out, ctx);
  const size_t stage_bytes = StagePayloadBytes(h.params, g);
  std::span<const std::byte> stage = payload;
  if (h.params.uses_zstd()) {
    std::span<std::byte> buf(ctx->Staging(stage_bytes), stage_bytes);
    KV_RETURN_IF_ERROR(ZstdDecompressExact(ctx, payload, buf));
    stage = buf;
  }
  KV_CHECK(stage.size() == stage_bytes);  // Checked by DecodeBlockHeader without zstd.
  switch (h.params.codec) {
    case CodecId::kIdentity:
      std::memcpy(out.data(), stage.data(), stage_bytes);
      return Status::Ok();
    case CodecId::kShuffleZstd:
      UnshufflePlanes(ctx->kernels(), g.dtype, stage.data(), out.first(stage_bytes));
      return Status::Ok();
    case CodecId::kInt8:
    case CodecId::kInt4:
    case CodecId::kInt8Rot:
    case CodecId::kInt4Rot:
    case CodecId::kK8V4:
    case CodecId::kK8V4Rot:
      return DequantizeBlock(g, SchemeOf(h.params.codec), h.params.group_size, stage, out, ctx);
    case CodecId::kEcq5:
    case CodecId::kEcq6:
    case CodecId::kEcq6V5:
      break;  // DecodeEcqPayload above.
  }
  return Status::Corruption("encoded block: unknown codec");  // DecodeBlockHeader refuses it.
}

}  // namespace

Status DecodeBlock(std::span<const std::byte> encoded, const BlockGeometry& expected,
                   std::span<std::byte> out, CodecContext* ctx) {
  KV_RETURN_IF_ERROR(expected.Validate());
  if (out.size() < expected.raw_bytes()) {
    return Status::InvalidArgument("decode: output buffer of " + std::to_string(out.size()) +
                                   " bytes is below the block's " +
                                   std::to_string(expected.raw_bytes()));
  }
  if (!AlignedFor(out.data(), expected.dtype)) {
    return Status::InvalidArgument("decode: output buffer not aligned to its element size");
  }
  KV_ASSIGN_OR_RETURN(const BlockHeader header, DecodeBlockHeader(encoded));
  if (header.geometry != expected) {
    return Status::Corruption("encoded block: geometry " + header.geometry.ToString() +
                              " differs from the expected " + expected.ToString());
  }
  if (encoded.size() != header.encoded_bytes()) {
    return Status::Corruption("encoded block: " + std::to_string(encoded.size()) +
                              " bytes, header says " + std::to_string(header.encoded_bytes()) +
                              (encoded.size() < header.encoded_bytes() ? " (truncated)" : ""));
  }
  return DecodePayload(header, encoded.subspan(kBlockHeaderBytes), out, ctx);
}

// ---------------------------------------------------------------------------------------------
// Codec

namespace {

class BlockCodec final : public Codec {
 public:
  explicit BlockCodec(const CodecParams& params) : params_(params) {}

  const CodecParams& params() const override { return params_; }

  Result<size_t> MaxEncodedSize(const BlockGeometry& geometry) const override {
    return codecs::MaxEncodedSize(params_, geometry);
  }

  Status EncodeBatch(std::span<EncodeJob> jobs, CodecContext* ctx) const override {
    Status first;
    for (EncodeJob& job : jobs) {
      Result<size_t> r = EncodeBlock(params_, job.geometry, job.raw, job.out, ctx);
      job.status = r.ok() ? Status::Ok() : r.status();
      job.encoded_bytes = r.ok() ? *r : 0;
      if (first.ok() && !job.status.ok()) first = job.status;
    }
    return first;
  }

  Status DecodeBatch(std::span<DecodeJob> jobs, CodecContext* ctx) const override {
    Status first;
    for (DecodeJob& job : jobs) {
      job.status = DecodeBlock(job.encoded, job.expected, job.out, ctx);
      if (first.ok() && !job.status.ok()) first = job.status;
    }
    return first;
  }

 private:
  const CodecParams params_;
};

}  // namespace

Result<std::unique_ptr<Codec>> MakeCodec(const CodecParams& params) {
  KV_RETURN_IF_ERROR(params.Validate());
  return std::unique_ptr<Codec>(std::make_unique<BlockCodec>(params));
}

}  // namespace kvtier::codecs
