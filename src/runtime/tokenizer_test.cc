// Goal: the BPE tokenizer encodes like SentencePiece/llama2.c (dummy prefix, highest-score
// merges first, leftmost on ties, byte fallback), decodes back to the text, and rejects
// malformed llama2.c tokenizer files.
// Method: a hand-built vocabulary with known merges checks exact token ids; round trips run
// over ASCII, UTF-8 and bytes absent from the vocabulary with the real tok512.bin (when
// present), compared with a quadratic reference merge loop written here; hostile files
// (truncated, negative/oversized lengths, trailing bytes) check each error.
#include "runtime/tokenizer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/coding.h"
#include "runtime/test_util.h"

namespace kvtier::runtime {
namespace {

Tokenizer::Vocabulary SmallVocab() {
  Tokenizer::Vocabulary v;
  v.pieces = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    v.pieces.emplace_back(buf);
  }
  v.scores.assign(v.pieces.size(), 0.0f);
  const std::vector<std::pair<std::string, float>> extra = {
      {" ", -100}, {"a", -100}, {"b", -100},    {"c", -100}, {"ab", -1},
      {"bc", -2},  {" ab", -3}, {"abc", -0.5f}, {"é", -100}};
  for (const auto& [p, s] : extra) {
    v.pieces.push_back(p);
    v.scores.push_back(s);
  }
  return v;
}

uint32_t Id(const Tokenizer& t, const std::string& piece) {
  for (uint32_t i = 0; i < t.vocab_size(); ++i) {
    if (t.Piece(i) == piece) return i;
  }
  return UINT32_MAX;
}

TEST(TokenizerTest, MergesByScoreWithByteFallback) {
  auto t = Tokenizer::FromVocabulary(SmallVocab());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // " abc": symbols ' ' a b c; best pair "ab" (-1) beats "bc" (-2); then " " + "ab" -> " ab"
  // (-3) vs "ab"+"c" -> "abc" (-0.5): "abc" wins; then " "+"abc" is not a piece.
  auto ids = t->Encode("abc", {.add_bos = true});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<uint32_t>{1, Id(*t, " "), Id(*t, "abc")}));
  // 'z' is not in the vocabulary: byte fallback <0x7A>; "é" is a piece; "ü" falls back to bytes.
  ids = t->Encode("zéü", {.add_bos = false});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<uint32_t>{Id(*t, " "), 3 + 'z', Id(*t, "é"), 3 + 0xC3, 3 + 0xBC}));
  EXPECT_EQ(t->Decode(*ids), " zéü");
  std::vector<uint32_t> with_bos = {1};
  with_bos.insert(with_bos.end(), ids->begin(), ids->end());
  EXPECT_EQ(t->Decode(with_bos), "zéü");  // The dummy prefix goes after BOS.
  EXPECT_EQ(t->Encode("", {.add_bos = false})->size(), 0u);
}

// llama2.c's algorithm written plainly: initial symbols (dummy prefix, code points or byte
// fallbacks), then repeatedly merge the best-scoring adjacent pair (leftmost on ties).
std::vector<uint32_t> QuadraticEncode(const Tokenizer& t, const std::string& text) {
  std::vector<uint32_t> ids = {Id(t, " ")};
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    size_t len = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    size_t have = 1;
    while (have < len && i + have < text.size() &&
           (static_cast<unsigned char>(text[i + have]) & 0xc0) == 0x80) {
      ++have;
    }
    const uint32_t id = Id(t, text.substr(i, have));
    if (id != UINT32_MAX && id > 2) {
      ids.push_back(id);
    } else {
      for (size_t b = 0; b < have; ++b) ids.push_back(3 + static_cast<unsigned char>(text[i + b]));
    }
    i += have;
  }
  while (true) {
    float best = -1e30f;
    size_t best_i = SIZE_MAX;
    uint32_t best_id = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const uint32_t id = Id(t, t.Piece(ids[i]) + t.Piece(ids[i + 1]));
      if (id != UINT32_MAX && id > 2 && t.Score(id) > best) {
        best = t.Score(id);
        best_i = i;
        best_id = id;
      }
    }
    if (best_i == SIZE_MAX) return ids;
    ids[best_i] = best_id;
    ids.erase(ids.begin() + static_cast<ptrdiff_t>(best_i) + 1);
  }
}

TEST(TokenizerTest, Tok512RoundTripsAndMatchesQuadraticMerge) {
  KV_SKIP_WITHOUT_MODEL("tok512.bin");
  auto t = Tokenizer::LoadLlama2c(testing::SharedModelPath("tok512.bin"), 512);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily.",
      "Hello\nworld  \t!",
      "naïve café — 東京 🙂",
      std::string("\x01\xff\x80 raw", 7),
      " leading space",
      "The cat sat on the mat and the dog ran to the park to play with the ball."};
  for (const std::string& text : texts) {
    auto ids = t->Encode(text, {.add_bos = true});
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(t->Decode(*ids), text) << text;
    auto plain = t->Encode(text, {.add_bos = false});
    EXPECT_EQ(*plain, QuadraticEncode(*t, text)) << text;
  }
  auto ids = t->Encode("Once upon a time", {.add_bos = true});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), 1u);
  EXPECT_LT(ids->size(), 8u);  // Merged into a few multi-character pieces.
}

std::string TokenizerFile(const std::vector<std::pair<float, std::string>>& tokens,
                          int32_t max_len) {
  std::string out;
  PutFixed32(&out, static_cast<uint32_t>(max_len));
  for (const auto& [score, piece] : tokens) {
    uint32_t bits;
    std::memcpy(&bits, &score, 4);
    PutFixed32(&out, bits);
    PutFixed32(&out, static_cast<uint32_t>(piece.size()));
    out += piece;
  }
  return out;
}

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

TEST(TokenizerTest, RejectsMalformedLlama2cFiles) {
  const std::string good = TokenizerFile({{0, "<unk>"}, {0, "<s>"}, {0, "</s>"}, {-1, "ab"}}, 5);
  EXPECT_TRUE(Tokenizer::ParseLlama2c(Bytes(good), 4).ok());
  for (size_t len = 0; len < good.size(); ++len) {
    auto r = Tokenizer::ParseLlama2c(Bytes(good.substr(0, len)), 4);
    ASSERT_FALSE(r.ok()) << len;
    EXPECT_TRUE(r.status().IsCorruption());
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().ToString();
  }
  auto trailing = Tokenizer::ParseLlama2c(Bytes(good + "zz"), 4);
  EXPECT_NE(trailing.status().message().find("trailing"), std::string::npos);
  std::string negative = good;
  EncodeFixed32(reinterpret_cast<std::byte*>(negative.data()) + 8, 0xffffffffu);
  auto neg = Tokenizer::ParseLlama2c(Bytes(negative), 4);
  EXPECT_NE(neg.status().message().find("length -1"), std::string::npos) << neg.status().ToString();
  auto bad_max = Tokenizer::ParseLlama2c(Bytes(TokenizerFile({{0, "a"}}, -7)), 1);
  EXPECT_NE(bad_max.status().message().find("max_token_length"), std::string::npos);
  auto absurd = Tokenizer::ParseLlama2c(Bytes(good), 1u << 30);
  EXPECT_TRUE(absurd.status().IsInvalidArgument());
  auto too_many = Tokenizer::ParseLlama2c(Bytes(good), 100000);
  EXPECT_NE(too_many.status().message().find("truncated"), std::string::npos);
}

TEST(TokenizerTest, RejectsInconsistentVocabulary) {
  Tokenizer::Vocabulary v = SmallVocab();
  v.scores.pop_back();
  EXPECT_TRUE(Tokenizer::FromVocabulary(v).status().IsInvalidArgument());
  v = SmallVocab();
  v.bos_id = 100000;
  EXPECT_TRUE(Tokenizer::FromVocabulary(v).status().IsInvalidArgument());
}

}  // namespace
}  // namespace kvtier::runtime
