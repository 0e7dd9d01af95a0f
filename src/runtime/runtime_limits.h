// Bounds of the reference runtime: model geometry, vocabulary, file-format fields and context.
// Every loader checks untrusted fields against these before it allocates anything, so a hostile
// or corrupt file yields a Status naming the field instead of a crash or a giant allocation.
//
// Why here and not in core/limits.h: they concern only the runtime layer (model files and the
// transformer), and core must not know about models.
//
// Thread safety: constants only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/limits.h"

namespace kvtier::runtime {

// Model geometry. The largest real llama-family models stay well inside these (Llama-3-405B:
// dim 16384, hidden 53248, 126 layers, 128 heads).
inline constexpr uint32_t kModelDimMax = 65536;
inline constexpr uint32_t kHiddenDimMax = 1u << 18;
inline constexpr uint32_t kModelLayersMax = kLayersMax;
inline constexpr uint32_t kHeadsMax = 1024;
inline constexpr uint32_t kModelHeadDimMax = 1024;
// Largest vocabulary accepted (Gemma's 256k fits; 1M is absurd for a llama tokenizer).
inline constexpr uint32_t kVocabMax = 1u << 20;
// Longest token piece in bytes.
inline constexpr uint32_t kTokenBytesMax = 1024;
// Positions a sequence may reach (KV capacity): 1M tokens.
inline constexpr uint32_t kContextTokensMax = 1u << 20;
// Tokens per prefill chunk.
inline constexpr uint32_t kPrefillChunkTokensMax = 1u << 16;
inline constexpr uint32_t kPrefillChunkTokensDefault = 2048;
// Threads one layer's attention may use (ForwardOptions::attention_threads).
inline constexpr uint32_t kAttentionThreadsMax = 2;
// KV bytes a layer's attention must read before it is split over two threads: below this the
// hand-off to the helper (a few microseconds) is not repaid.
inline constexpr uint64_t kAttentionSplitBytesMin = uint64_t{1} << 20;
// Bytes of text one Encode() call takes (64 MiB).
inline constexpr size_t kEncodeTextBytesMax = size_t{64} << 20;

// GGUF fields.
inline constexpr uint64_t kGgufTensorsMax = 1u << 16;
inline constexpr uint64_t kGgufKvMax = 1u << 16;
inline constexpr uint64_t kGgufStringBytesMax = 1u << 20;
inline constexpr uint64_t kGgufArrayElemsMax = 1u << 22;
inline constexpr uint32_t kGgufTensorDimsMax = 4;
inline constexpr uint64_t kGgufTensorNameBytesMax = 256;
inline constexpr uint32_t kGgufAlignmentMax = 1u << 16;
inline constexpr uint32_t kGgufAlignmentDefault = 32;

static_assert(kVocabMax <= kGgufArrayElemsMax);
static_assert(kModelHeadDimMax <= kHeadDimMax);
static_assert(kHeadsMax <= kKvHeadsMax);
static_assert(kPrefillChunkTokensDefault <= kPrefillChunkTokensMax);

}  // namespace kvtier::runtime
