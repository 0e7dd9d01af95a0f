// Tokenizer: a SentencePiece-style BPE vocabulary (pieces with merge scores, byte-fallback tokens
// <0x00>..<0xFF>), as llama2.c tokenizer files and GGUF llama vocabularies carry it.
//
// Encode: a dummy-prefix space is prepended to non-empty text, the text is split into UTF-8
// code points, each becomes its piece or, when the vocabulary lacks it, one byte-fallback token
// per byte; then the adjacent pair whose concatenation is a piece with the highest score is
// merged (leftmost on ties), until no pair merges. A heap with lazy invalidation makes this
// O(n log n), so long documents encode quickly; the result equals the quadratic scan's.
// Decode: byte tokens become their byte, control tokens (BOS/EOS) become nothing, and a piece
// following BOS loses its leading space (the dummy prefix).
//
// The llama2.c tokenizer file: i32 max_token_length, then per token: f32 score, i32 length,
// `length` bytes. The token count comes from the model, not the file. Every field is checked
// (negative or oversized lengths, truncation, trailing bytes).
//
// Thread safety: immutable after construction; Encode/Decode may run concurrently.
// Ownership: a value type (move or copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvtier/result.h"

namespace kvtier::runtime {

// GGUF's token types (tokenizer.ggml.token_type); the values are GGUF's.
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct EncodeOptions {
  bool add_bos = true;
  bool add_eos = false;
};

class Tokenizer {
 public:
  struct Vocabulary {
    std::vector<std::string> pieces;
    std::vector<float> scores;
    std::vector<TokenType> types;  // Empty: inferred (see FromVocabulary).
    uint32_t bos_id = 1;
    uint32_t eos_id = 2;
    uint32_t unk_id = 0;
  };

  // Validates sizes, ids and limits. With empty `types`, <0xNN> pieces are bytes, bos/eos are
  // control, unk is unknown, the rest normal.
  static Result<Tokenizer> FromVocabulary(Vocabulary vocab);
  // Parses a llama2.c tokenizer file holding exactly `vocab_size` tokens.
  static Result<Tokenizer> ParseLlama2c(std::span<const std::byte> bytes, uint32_t vocab_size);
  static Result<Tokenizer> LoadLlama2c(const std::string& path, uint32_t vocab_size);

  uint32_t vocab_size() const { return static_cast<uint32_t>(vocab_.pieces.size()); }
  uint32_t bos_id() const { return vocab_.bos_id; }
  uint32_t eos_id() const { return vocab_.eos_id; }
  const std::string& Piece(uint32_t id) const { return vocab_.pieces[id]; }
  float Score(uint32_t id) const { return vocab_.scores[id]; }

  // InvalidArgument for text longer than kEncodeTextBytesMax.
  Result<std::vector<uint32_t>> Encode(std::string_view text,
                                       const EncodeOptions& options = {}) const;
  // The bytes token `token` contributes after `prev`; ids out of range decode to nothing.
  std::string DecodeToken(uint32_t prev, uint32_t token) const;
  // Concatenated DecodeToken over a sequence (the first token's prev is "none").
  std::string Decode(std::span<const uint32_t> tokens) const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  explicit Tokenizer(Vocabulary vocab);
  void BuildIndex();
  // Initial symbols of `text` (code points or byte fallbacks), appended to `ids`.
  void SplitToSymbols(std::string_view text, std::vector<uint32_t>* ids) const;
  void MergePairs(std::vector<uint32_t>* ids) const;
  int64_t Lookup(std::string_view piece) const;  // -1 when absent.

  Vocabulary vocab_;
  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> index_;
  int64_t byte_token_[256] = {};  // Token of byte b, -1 when the vocabulary has none.
};

}  // namespace kvtier::runtime
