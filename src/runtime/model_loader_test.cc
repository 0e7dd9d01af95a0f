// Goal: llama2.c checkpoints and tokenizer files load exactly, and every malformed variant —
// bad header fields, truncation at any point, trailing bytes, absurd sizes — gives a Status
// naming the problem instead of a crash or a huge allocation.
// Method: checkpoints are written from synthetic weights in llama2.c's layout (shared and
// separate classifier, with and without the legacy RoPE tables) and read back bit-exactly;
// hostile variants patch header fields or cut the file, and each is checked for its error code
// and a message naming the field. A FIFO, a directory and a device as the model or the tokenizer
// are refused at once (a FIFO without a writer must not block the open). The real stories260K
// files are also loaded when present.
#include "runtime/model_loader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/coding.h"
#include "runtime/synthetic.h"
#include "runtime/test_util.h"

namespace kvtier::runtime {
namespace {

ModelConfig TinyConfig(ClassifierMode classifier) {
  return ModelConfig{.dim = 16,
                     .hidden_dim = 24,
                     .n_layers = 2,
                     .n_heads = 4,
                     .n_kv_heads = 2,
                     .head_dim = 4,
                     .vocab_size = 40,
                     .seq_len = 8,
                     .classifier = classifier};
}

// A llama2.c checkpoint image of synthetic weights.
std::string Checkpoint(const ModelConfig& c, bool with_rope_tables = true) {
  auto w = MakeSyntheticWeights(c, 3);
  EXPECT_TRUE(w.ok());
  std::string out;
  const bool shared = c.classifier == ClassifierMode::kShared;
  for (int32_t v : {int32_t(c.dim), int32_t(c.hidden_dim), int32_t(c.n_layers), int32_t(c.n_heads),
                    int32_t(c.n_kv_heads), shared ? int32_t(c.vocab_size) : -int32_t(c.vocab_size),
                    int32_t(c.seq_len)}) {
    PutFixed32(&out, static_cast<uint32_t>(v));
  }
  std::span<const float> all = w->MutableAll();
  const size_t cls = shared ? 0 : size_t{c.vocab_size} * c.dim;
  out.append(reinterpret_cast<const char*>(all.data()), (all.size() - cls) * 4);
  if (with_rope_tables) out.append(size_t{c.seq_len} * c.head_dim * 4, '\0');
  out.append(reinterpret_cast<const char*>(all.data() + all.size() - cls), cls * 4);
  return out;
}

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string WithHeaderField(std::string image, size_t index, int32_t value) {
  EncodeFixed32(reinterpret_cast<std::byte*>(image.data()) + 4 * index,
                static_cast<uint32_t>(value));
  return image;
}

template <typename T>
void ExpectError(const Result<T>& r, StatusCode code, const std::string& needle) {
  ASSERT_FALSE(r.ok()) << "expected an error mentioning '" << needle << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

TEST(Llama2cLoaderTest, RoundTripsSharedAndSeparateClassifier) {
  for (ClassifierMode mode : {ClassifierMode::kShared, ClassifierMode::kSeparate}) {
    const ModelConfig c = TinyConfig(mode);
    auto expected = MakeSyntheticWeights(c, 3);
    ASSERT_TRUE(expected.ok());
    for (bool tables : {true, false}) {
      if (!tables && mode == ClassifierMode::kSeparate) continue;
      auto got = ParseLlama2cCheckpoint(Bytes(Checkpoint(c, tables)));
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(got->config().classifier, mode);
      EXPECT_EQ(got->config().head_dim, 4u);
      const auto a = got->MutableAll();
      const auto b = expected->MutableAll();
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
    }
  }
}

TEST(Llama2cLoaderTest, RejectsBadHeaderFields) {
  const std::string good = Checkpoint(TinyConfig(ClassifierMode::kShared));
  const StatusCode kCorrupt = StatusCode::kCorruption;
  ExpectError(ParseLlama2cCheckpoint(Bytes(WithHeaderField(good, 0, -16))), kCorrupt, "dim");
  ExpectError(ParseLlama2cCheckpoint(Bytes(WithHeaderField(good, 2, 0))), kCorrupt, "n_layers");
  ExpectError(ParseLlama2cCheckpoint(Bytes(WithHeaderField(good, 4, 3))), kCorrupt,
              "not divisible by n_kv_heads");
  ExpectError(ParseLlama2cCheckpoint(Bytes(WithHeaderField(good, 3, 3))), kCorrupt,
              "not divisible by n_heads");
  ExpectError(ParseLlama2cCheckpoint(Bytes(WithHeaderField(good, 5, 1 << 30))), kCorrupt,
              "vocab_size");
  ExpectError(ParseLlama2cCheckpoint(Bytes(WithHeaderField(good, 5, INT32_MIN))), kCorrupt,
              "vocab_size");
  ExpectError(ParseLlama2cCheckpoint(Bytes(WithHeaderField(good, 6, -1))), kCorrupt, "seq_len");
  // Huge but in-range dimensions: the size check fails before any allocation.
  std::string huge = WithHeaderField(WithHeaderField(good, 0, 65536), 1, 1 << 18);
  huge = WithHeaderField(WithHeaderField(huge, 2, 1024), 3, 512);
  ExpectError(ParseLlama2cCheckpoint(Bytes(WithHeaderField(huge, 4, 512))), kCorrupt, "truncated");
}

TEST(Llama2cLoaderTest, RejectsTruncationAndTrailingBytes) {
  const std::string good = Checkpoint(TinyConfig(ClassifierMode::kSeparate));
  for (size_t len : {size_t{0}, size_t{4}, size_t{27}, size_t{28}, size_t{100}, good.size() - 1}) {
    auto r = ParseLlama2cCheckpoint(Bytes(good.substr(0, len)));
    ExpectError(r, StatusCode::kCorruption, "truncated");
  }
  ExpectError(ParseLlama2cCheckpoint(Bytes(good + "x")), StatusCode::kCorruption, "trailing");
}

TEST(Llama2cLoaderTest, LoadsFilesAndReportsPath) {
  testing::TempDir dir;
  const std::string path = dir.Write("m.bin", Checkpoint(TinyConfig(ClassifierMode::kShared)));
  EXPECT_TRUE(LoadLlama2cCheckpoint(path).ok());
  auto missing = LoadLlama2cCheckpoint(dir.Path("absent.bin"));
  EXPECT_TRUE(missing.status().IsNotFound());
  const std::string cut =
      dir.Write("cut.bin", Checkpoint(TinyConfig(ClassifierMode::kShared)).substr(0, 50));
  auto r = LoadLlama2cCheckpoint(cut);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cut.bin"), std::string::npos);
}

// A FIFO, a directory or a device given as the model or the tokenizer is refused at once: a FIFO
// without a writer must not make the open wait for one.
TEST(Llama2cLoaderTest, RefusesFilesThatAreNotRegular) {
  testing::TempDir dir;
  const std::string fifo = dir.Path("model.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string good = dir.Write("m.bin", Checkpoint(TinyConfig(ClassifierMode::kShared)));
  for (const std::string& path : {fifo, dir.Path(""), std::string("/dev/null")}) {
    ExpectError(LoadLlama2cCheckpoint(path), StatusCode::kInvalidArgument, "not a regular file");
    ExpectError(LoadModel(good, path), StatusCode::kInvalidArgument, "not a regular file");
  }
}

TEST(Llama2cLoaderTest, LoadsStories260K) {
  KV_SKIP_WITHOUT_MODEL("stories260K.bin");
  KV_SKIP_WITHOUT_MODEL("tok512.bin");
  auto loaded = LoadModel(testing::SharedModelPath("stories260K.bin"),
                          testing::SharedModelPath("tok512.bin"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const ModelConfig& c = loaded->weights.config();
  EXPECT_EQ(c.dim, 64u);
  EXPECT_EQ(c.hidden_dim, 172u);
  EXPECT_EQ(c.n_layers, 5u);
  EXPECT_EQ(c.n_heads, 8u);
  EXPECT_EQ(c.n_kv_heads, 4u);
  EXPECT_EQ(c.vocab_size, 512u);
  EXPECT_EQ(c.seq_len, 512u);
  EXPECT_EQ(c.classifier, ClassifierMode::kShared);
  ASSERT_TRUE(loaded->tokenizer.has_value());
  EXPECT_EQ(loaded->tokenizer->vocab_size(), 512u);
}

}  // namespace
}  // namespace kvtier::runtime
