#include "runtime/tokenizer.h"

#include <bit>
#include <cmath>
#include <queue>
#include <utility>

#include "core/assert.h"
#include "core/coding.h"
#include "runtime/mapped_file.h"
#include "runtime/runtime_limits.h"

namespace kvtier::runtime {
namespace {

// Parses "<0xNN>" (upper- or lowercase hex); -1 for anything else.
int ParseByteToken(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char ch = piece[i];
    int digit = -1;
    if (ch >= '0' && ch <= '9') digit = ch - '0';
    if (ch >= 'A' && ch <= 'F') digit = ch - 'A' + 10;
    if (ch >= 'a' && ch <= 'f') digit = ch - 'a' + 10;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// Bytes in the UTF-8 sequence that starts with `lead` (1 for stray continuation bytes).
size_t Utf8Length(unsigned char lead) {
  if (lead >= 0xf0) return 4;
  if (lead >= 0xe0) return 3;
  if (lead >= 0xc0) return 2;
  return 1;
}

struct MergeCandidate {
  float score;
  size_t left;
  size_t right;
  uint32_t left_id;
  uint32_t right_id;
  uint32_t merged_id;
};

// Highest score first; among equal scores the leftmost pair.
struct CandidateOrder {
  bool operator()(const MergeCandidate& a, const MergeCandidate& b) const {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  }
};

}  // namespace

Tokenizer::Tokenizer(Vocabulary vocab) : vocab_(std::move(vocab)) {}

Result<Tokenizer> Tokenizer::FromVocabulary(Vocabulary vocab) {
  const size_t n = vocab.pieces.size();
  if (n == 0 || n > kVocabMax) {
    return Status::InvalidArgument("vocabulary size " + std::to_string(n) + " is outside [1, " +
                                   std::to_string(kVocabMax) + "]");
  }
  if (vocab.scores.size() != n) {
    return Status::InvalidArgument("vocabulary has " + std::to_string(n) + " pieces but " +
                                   std::to_string(vocab.scores.size()) + " scores");
  }
  if (!vocab.types.empty() && vocab.types.size() != n) {
    return Status::InvalidArgument("vocabulary has " + std::to_string(n) + " pieces but " +
                                   std::to_string(vocab.types.size()) + " token types");
  }
  if (vocab.bos_id >= n || vocab.eos_id >= n || vocab.unk_id >= n) {
    return Status::InvalidArgument("bos/eos/unk id outside the vocabulary");
  }
  for (size_t i = 0; i < n; ++i) {
    if (vocab.pieces[i].size() > kTokenBytesMax) {
      return Status::InvalidArgument("token " + std::to_string(i) + " is longer than " +
                                     std::to_string(kTokenBytesMax) + " bytes");
    }
    if (std::isnan(vocab.scores[i])) {
      return Status::InvalidArgument("token " + std::to_string(i) + " has a NaN score");
    }
  }
  if (vocab.types.empty()) {
    vocab.types.resize(n, TokenType::kNormal);
    for (size_t i = 0; i < n; ++i) {
      if (ParseByteToken(vocab.pieces[i]) >= 0) vocab.types[i] = TokenType::kByte;
    }
    vocab.types[vocab.unk_id] = TokenType::kUnknown;
    vocab.types[vocab.bos_id] = TokenType::kControl;
    vocab.types[vocab.eos_id] = TokenType::kControl;
  }
  Tokenizer tokenizer(std::move(vocab));
  tokenizer.BuildIndex();
  return tokenizer;
}

void Tokenizer::BuildIndex() {
  index_.reserve(vocab_.pieces.size());
  for (int64_t& t : byte_token_) t = -1;
  for (uint32_t id = 0; id < vocab_.pieces.size(); ++id) {
    const std::string& piece = vocab_.pieces[id];
    const int byte = ParseByteToken(piece);
    if (byte >= 0 && byte_token_[byte] < 0) byte_token_[byte] = id;
    // Control and unknown tokens never come out of merges or code points.
    if (vocab_.types[id] == TokenType::kControl || vocab_.types[id] == TokenType::kUnknown) {
      continue;
    }
    index_.emplace(piece, id);  // The first id of a duplicated piece wins.
  }
}

Result<Tokenizer> Tokenizer::ParseLlama2c(std::span<const std::byte> bytes, uint32_t vocab_size) {
  if (vocab_size == 0 || vocab_size > kVocabMax) {
    return Status::InvalidArgument("vocabulary size " + std::to_string(vocab_size) +
                                   " is outside [1, " + std::to_string(kVocabMax) + "]");
  }
  // Each token takes at least 8 bytes (score and length): check before allocating.
  if (bytes.size() < 4 + uint64_t{vocab_size} * 8) {
    return Status::Corruption("tokenizer file of " + std::to_string(bytes.size()) +
                              " bytes is truncated: " + std::to_string(vocab_size) +
                              " tokens need at least " +
                              std::to_string(4 + uint64_t{vocab_size} * 8));
  }
  ByteReader reader(bytes);
  uint32_t max_len = 0;
  KV_CHECK(reader.GetFixed32(&max_len));
  if (max_len == 0 || max_len > kTokenBytesMax) {
    return Status::Corruption("tokenizer max_token_length " +
                              std::to_string(static_cast<int32_t>(max_len)) + " is outside [1, " +
                              std::to_string(kTokenBytesMax) + "]");
  }
  Vocabulary vocab;
  vocab.pieces.reserve(vocab_size);
  vocab.scores.reserve(vocab_size);
  for (uint32_t i = 0; i < vocab_size; ++i) {
    uint32_t score_bits = 0;
    uint32_t len = 0;
    std::span<const std::byte> piece;
    if (!reader.GetFixed32(&score_bits) || !reader.GetFixed32(&len)) {
      return Status::Corruption("tokenizer file truncated at token " + std::to_string(i));
    }
    if (len > kTokenBytesMax) {
      return Status::Corruption("tokenizer token " + std::to_string(i) + " has length " +
                                std::to_string(static_cast<int32_t>(len)) + ", outside [0, " +
                                std::to_string(kTokenBytesMax) + "]");
    }
    if (!reader.GetBytes(len, &piece)) {
      return Status::Corruption("tokenizer file truncated in token " + std::to_string(i));
    }
    vocab.scores.push_back(std::bit_cast<float>(score_bits));
    vocab.pieces.emplace_back(reinterpret_cast<const char*>(piece.data()), piece.size());
  }
  if (reader.remaining() != 0) {
    return Status::Corruption("tokenizer file has " + std::to_string(reader.remaining()) +
                              " trailing bytes after " + std::to_string(vocab_size) + " tokens");
  }
  return FromVocabulary(std::move(vocab));
}

Result<Tokenizer> Tokenizer::LoadLlama2c(const std::string& path, uint32_t vocab_size) {
  KV_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  Result<Tokenizer> tokenizer = ParseLlama2c(file.bytes(), vocab_size);
  if (!tokenizer.ok()) return tokenizer.status().WithContext(path);
  return tokenizer;
}

int64_t Tokenizer::Lookup(std::string_view piece) const {
  const auto it = index_.find(piece);
  return it == index_.end() ? -1 : int64_t{it->second};
}

void Tokenizer::SplitToSymbols(std::string_view text, std::vector<uint32_t>* ids) const {
  for (size_t i = 0; i < text.size();) {
    size_t len = Utf8Length(static_cast<unsigned char>(text[i]));
    // Only real continuation bytes extend a code point; truncated sequences fall back to bytes.
    size_t have = 1;
    while (have < len && i + have < text.size() &&
           (static_cast<unsigned char>(text[i + have]) & 0xc0) == 0x80) {
      ++have;
    }
    len = have;
    const int64_t id = Lookup(text.substr(i, len));
    if (id >= 0) {
      ids->push_back(static_cast<uint32_t>(id));
    } else {
      for (size_t b = 0; b < len; ++b) {
        const int64_t byte_id = byte_token_[static_cast<unsigned char>(text[i + b])];
        ids->push_back(byte_id >= 0 ? static_cast<uint32_t>(byte_id) : vocab_.unk_id);
      }
    }
    i += len;
  }
}

void Tokenizer::MergePairs(std::vector<uint32_t>* ids) const {
  std::vector<uint32_t>& sym = *ids;
  const size_t n = sym.size();
  constexpr size_t kNone = SIZE_MAX;
  std::vector<size_t> prev(n);
  std::vector<size_t> next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? kNone : i - 1;
    next[i] = i + 1 == n ? kNone : i + 1;
  }
  std::priority_queue<MergeCandidate, std::vector<MergeCandidate>, CandidateOrder> heap;
  std::string joined;
  auto consider = [&](size_t left, size_t right) {
    if (left == kNone || right == kNone) return;
    joined.assign(vocab_.pieces[sym[left]]).append(vocab_.pieces[sym[right]]);
    const int64_t merged = Lookup(joined);
    if (merged < 0) return;
    const auto id = static_cast<uint32_t>(merged);
    heap.push({vocab_.scores[id], left, right, sym[left], sym[right], id});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(i, i + 1);
  while (!heap.empty()) {
    const MergeCandidate c = heap.top();
    heap.pop();
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || sym[c.left] != c.left_id ||
        sym[c.right] != c.right_id) {
      continue;  // Stale: one side merged since this candidate was pushed.
    }
    sym[c.left] = c.merged_id;
    alive[c.right] = false;
    next[c.left] = next[c.right];
    if (next[c.right] != kNone) prev[next[c.right]] = c.left;
    consider(prev[c.left], c.left);
    consider(c.left, next[c.left]);
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) sym[out++] = sym[i];
  }
  sym.resize(out);
}

Result<std::vector<uint32_t>> Tokenizer::Encode(std::string_view text,
                                                const EncodeOptions& options) const {
  if (text.size() > kEncodeTextBytesMax) {
    return Status::InvalidArgument("text of " + std::to_string(text.size()) +
                                   " bytes exceeds the encode limit of " +
                                   std::to_string(kEncodeTextBytesMax));
  }
  std::vector<uint32_t> symbols;
  symbols.reserve(text.size() + 1);
  if (!text.empty()) {
    const int64_t space = Lookup(" ");
    if (space >= 0) symbols.push_back(static_cast<uint32_t>(space));
  }
  SplitToSymbols(text, &symbols);
  MergePairs(&symbols);
  std::vector<uint32_t> tokens;
  tokens.reserve(symbols.size() + 2);
  if (options.add_bos) tokens.push_back(vocab_.bos_id);
  tokens.insert(tokens.end(), symbols.begin(), symbols.end());
  if (options.add_eos) tokens.push_back(vocab_.eos_id);
  return tokens;
}

std::string Tokenizer::DecodeToken(uint32_t prev, uint32_t token) const {
  if (token >= vocab_.pieces.size()) return {};
  const TokenType type = vocab_.types[token];
  if (type == TokenType::kControl) return {};
  const std::string& piece = vocab_.pieces[token];
  if (type == TokenType::kByte) {
    const int byte = ParseByteToken(piece);
    if (byte >= 0) return std::string(1, static_cast<char>(byte));
  }
  if (prev == vocab_.bos_id && !piece.empty() && piece[0] == ' ') return piece.substr(1);
  return piece;
}

std::string Tokenizer::Decode(std::span<const uint32_t> tokens) const {
  std::string out;
  uint32_t prev = UINT32_MAX;
  for (const uint32_t token : tokens) {
    out += DecodeToken(prev, token);
    prev = token;
  }
  return out;
}

}  // namespace kvtier::runtime
