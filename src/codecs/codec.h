// Block codecs: encode one KV block (K and V of one chunk for one layer) into a self-describing
// encoded block (docs/codecs.md), and decode it back, into caller-provided buffers.
//
// Why this shape: the data path must not allocate or throw. Callers size output buffers with
// MaxEncodedSize() (encode) or the geometry (decode), and keep one CodecContext per thread; it
// owns the zstd contexts and the scratch memory, which grows to the largest block seen and is
// then reused (Reserve() sizes it up front). Decoding trusts nothing in its input: any malformed,
// truncated or mismatching block yields Corruption (or InvalidArgument for caller mistakes),
// never a crash or an out-of-bounds access.
//
// Thread safety: EncodeBlock/DecodeBlock and Codec are safe to call concurrently with distinct
// CodecContexts; a CodecContext is used by one thread at a time. Ownership: spans are borrowed for
// the duration of a call only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "codecs/block_format.h"
#include "codecs/block_geometry.h"
#include "codecs/codec_params.h"
#include "codecs/kernels.h"
#include "kvtier/result.h"

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace kvtier::codecs {

struct CodecContextOptions {
  KernelIsa isa = KernelIsa::kAuto;  // kScalar forces the reference kernels (tests, debugging).
};

// Per-thread (or per-caller) state for encoding and decoding: zstd contexts and scratch memory.
// Move-only.
class CodecContext {
 public:
  // NoSpace when zstd cannot allocate its contexts.
  static Result<CodecContext> Create(const CodecContextOptions& options = {});

  CodecContext(CodecContext&&) noexcept;
  CodecContext& operator=(CodecContext&&) noexcept;
  ~CodecContext();

  // Sizes the scratch memory for any codec on blocks up to `geometry`, so that later calls on
  // such blocks allocate nothing. InvalidArgument for an invalid geometry.
  Status Reserve(const BlockGeometry& geometry);

  const Kernels& kernels() const { return *kernels_; }

  // For the codec implementations: zstd contexts and scratch arrays of at least `n` elements.
  ZSTD_CCtx_s* cctx() { return cctx_.get(); }
  ZSTD_DCtx_s* dctx() { return dctx_.get(); }
  float* F32Scratch(size_t n);
  float* ParamScratch(size_t n);
  uint8_t* CodeScratch(size_t n);
  std::byte* Staging(size_t n);

 private:
  struct CCtxDeleter {
    void operator()(ZSTD_CCtx_s* c) const;
  };
  struct DCtxDeleter {
    void operator()(ZSTD_DCtx_s* d) const;
  };

  CodecContext() = default;

  const Kernels* kernels_ = nullptr;
  std::unique_ptr<ZSTD_CCtx_s, CCtxDeleter> cctx_;
  std::unique_ptr<ZSTD_DCtx_s, DCtxDeleter> dctx_;
  std::vector<float> f32_;
  std::vector<float> params_;
  std::vector<uint8_t> codes_;
  std::vector<std::byte> staging_;
};

// Bytes an encoded block can take at most (header included). InvalidArgument for invalid params
// or geometry.
Result<size_t> MaxEncodedSize(const CodecParams& params, const BlockGeometry& geometry);

// Bytes an encoded block of `geometry` can take at most under any codec and any valid parameters
// (header included). Why: decoding accepts a block written by any codec, so a buffer that a
// stored block is read into must fit what another configuration may have written.
// InvalidArgument for an invalid geometry.
Result<size_t> MaxEncodedSizeAnyCodec(const BlockGeometry& geometry);

// Encodes `raw` (exactly geometry.raw_bytes(), aligned to the element size) into `out`, which
// must hold at least MaxEncodedSize() bytes. Returns the encoded size. InvalidArgument for bad
// params, geometry or buffer sizes, and for int8/int4 on values that are not finite or are
// beyond the FP16 range (the quantization scales are FP16).
Result<size_t> EncodeBlock(const CodecParams& params, const BlockGeometry& geometry,
                           std::span<const std::byte> raw, std::span<std::byte> out,
                           CodecContext* ctx);

// Decodes an encoded block of exactly `encoded.size()` bytes into `out` (at least
// expected.raw_bytes(), aligned to the element size), checking its header against `expected`.
// Corruption for any malformed input, including a geometry other than `expected`;
// InvalidArgument for an invalid `expected` or a too-small or misaligned `out`.
Status DecodeBlock(std::span<const std::byte> encoded, const BlockGeometry& expected,
                   std::span<std::byte> out, CodecContext* ctx);

// One block of a batch. `status` and `encoded_bytes` are outputs.
struct EncodeJob {
  BlockGeometry geometry;
  std::span<const std::byte> raw;
  std::span<std::byte> out;
  size_t encoded_bytes = 0;
  Status status = Status::Ok();
};
struct DecodeJob {
  BlockGeometry expected;
  std::span<const std::byte> encoded;
  std::span<std::byte> out;
  Status status = Status::Ok();
};

// A codec bound to its parameters, with batch entry points (one CodecContext serves the batch).
// Decoding accepts a block written by any codec, since blocks describe themselves.
class Codec {
 public:
  virtual ~Codec() = default;
  virtual const CodecParams& params() const = 0;
  virtual Result<size_t> MaxEncodedSize(const BlockGeometry& geometry) const = 0;
  // Every job is attempted; each gets its own status. Returns the first error, or OK.
  virtual Status EncodeBatch(std::span<EncodeJob> jobs, CodecContext* ctx) const = 0;
  virtual Status DecodeBatch(std::span<DecodeJob> jobs, CodecContext* ctx) const = 0;
};

// InvalidArgument for invalid params.
Result<std::unique_ptr<Codec>> MakeCodec(const CodecParams& params);

}  // namespace kvtier::codecs
