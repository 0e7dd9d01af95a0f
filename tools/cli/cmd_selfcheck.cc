// `kvtier selfcheck`: a short end-to-end check of the SSD path that a new user can run anywhere.
// It keys a few blocks exactly as the engine does, writes them through the SSD tier (O_DIRECT,
// io_uring, striped over two directories) into a temporary directory, reopens the tier so the
// index is recovered from disk, reads every block back and compares the bytes, then flips one
// byte on disk and checks that the damaged block is refused (a miss) while the others still read.
// Exit status 0 means every step held. Each step prints a line, or with --json stdout gets one
// JSON object at the end with what each step found, "passed" and "error".
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "command.h"
#include "core/aligned_buffer.h"
#include "core/block_key.h"
#include "core/kv_layout.h"
#include "env/env.h"
#include "interrupt.h"
#include "tiers/ssd_format.h"
#include "tiers/ssd/ssd_tier.h"
#include "json_output.h"

namespace kvtier::cli {
namespace {

constexpr uint32_t kChunks = 4;

struct Fixture {
  KvLayout layout;
  Hash256 layout_digest{};
  std::vector<BlockKey> keys;
  std::vector<std::vector<std::byte>> payloads;  // One per key, deterministic.
};

Result<Fixture> MakeFixture() {
  Fixture f;
  f.layout = {
      .layers = 4, .kv_heads = 8, .head_dim = 128, .dtype = DType::kF16, .block_tokens = 256};
  KV_RETURN_IF_ERROR(f.layout.Validate());
  f.layout_digest = LayoutDigest(f.layout);
  KV_ASSIGN_OR_RETURN(
      Hash256 ns, NamespaceDigest({.name = "kvtier-selfcheck"}, f.layout, "selfcheck-salt", {}));
  std::mt19937 rng(42);
  std::vector<uint32_t> tokens(kChunks * f.layout.block_tokens);
  for (uint32_t& t : tokens) t = static_cast<uint32_t>(rng() % 32000);
  KV_ASSIGN_OR_RETURN(std::vector<Hash256> chunks, ChunkHashes(ns, tokens, f.layout.block_tokens));
  const size_t block_bytes = f.layout.BlockBytes();
  for (const Hash256& chunk : chunks) {
    for (uint32_t layer = 0; layer < f.layout.layers; ++layer) {
      f.keys.push_back({.chunk_hash = chunk, .layer = layer});
      std::vector<std::byte> payload(block_bytes);
      for (std::byte& b : payload) b = std::byte{static_cast<uint8_t>(rng())};
      f.payloads.push_back(std::move(payload));
    }
  }
  return f;
}

SsdTierOptions TierOptions(const std::string& root) {
  return {.dirs = {root + "/ssd0", root + "/ssd1"},
          .capacity_bytes = 64 * kMiB,
          .segment_bytes = 8 * kMiB,
          .sync = SsdSyncMode::kPerBatch};
}

Status WriteAll(SsdTier& tier, const Fixture& f) {
  std::vector<SsdBlockWrite> writes(f.keys.size());
  for (size_t i = 0; i < f.keys.size(); ++i) {
    writes[i] = {.key = f.keys[i],
                 .layout_digest = f.layout_digest,
                 .codec_id = 0,
                 .raw_bytes = static_cast<uint32_t>(f.payloads[i].size()),
                 .payload = f.payloads[i]};
  }
  KV_RETURN_IF_ERROR(tier.WriteBatchSync(writes));
  for (const SsdBlockWrite& w : writes) KV_RETURN_IF_ERROR(w.status);
  return Status::Ok();
}

// Reads every block back; returns how many matched byte for byte and how many were misses.
Status ReadAll(SsdTier& tier, const Fixture& f, size_t* matched, size_t* misses) {
  const size_t record_bytes =
      AlignUp(ssd::kRecordPayloadOffset + f.payloads[0].size(), kDirectIoAlignment);
  std::vector<AlignedBuffer> buffers;
  std::vector<SsdBlockRead> reads(f.keys.size());
  for (size_t i = 0; i < f.keys.size(); ++i) {
    KV_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::Allocate(record_bytes));
    reads[i] = {.key = f.keys[i], .layout_digest = f.layout_digest, .buffer = buf.span()};
    buffers.push_back(std::move(buf));
  }
  KV_RETURN_IF_ERROR(tier.ReadBatchSync(reads));
  *matched = 0;
  *misses = 0;
  for (size_t i = 0; i < reads.size(); ++i) {
    if (reads[i].status.IsNotFound()) {
      ++*misses;
      continue;
    }
    KV_RETURN_IF_ERROR(reads[i].status);
    const auto& want = f.payloads[i];
    if (reads[i].payload.size() == want.size() &&
        std::memcmp(reads[i].payload.data(), want.data(), want.size()) == 0) {
      ++*matched;
    }
  }
  return Status::Ok();
}

// Flips one byte in the middle of the first record's payload of the first segment in `dir`.
Status DamageOneRecord(const std::string& dir) {
  std::string victim;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(ssd::kSegmentPrefix, 0) == 0 && (victim.empty() || name < victim)) {
      victim = entry.path().string();
    }
  }
  if (victim.empty()) return Status::NotFound("no segment file in " + dir);
  const int fd = ::open(victim.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, victim);
  const off_t offset =
      static_cast<off_t>(ssd::kSegmentHeaderBytes + ssd::kRecordPayloadOffset + 1000);
  unsigned char byte = 0;
  bool ok = ::pread(fd, &byte, 1, offset) == 1;
  byte ^= 0x5A;
  ok = ok && ::pwrite(fd, &byte, 1, offset) == 1 && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  return ok ? Status::Ok() : Status::FromErrno(err, victim);
}

class SelfcheckCommand final : public Command {
 public:
  explicit SelfcheckCommand(CLI::App* app)
      : Command(app->add_subcommand(
            "selfcheck", "Write, recover, read back and corrupt a few blocks on the SSD path")) {
    subcommand()->add_option("--dir", base_dir_,
                             "Where to make the temporary directory (default: $TMPDIR or "
                             "/var/tmp)");
    subcommand()->add_flag("--json", json_, "Print one JSON object with each step's findings");
  }

  int Run() override {
    const Status s = RunChecks();
    if (json_) {
      report_["passed"] = s.ok();
      report_["error"] = s.ok() ? "" : s.ToString();
      std::printf("%s\n", JsonText(report_, 1).c_str());
    }
    if (!s.ok()) return Fail(s);
    if (!json_) std::printf("selfcheck passed\n");
    return kExitOk;
  }

 private:
  Status RunChecks();
  Status Phases(const std::string& root, const Fixture& f);

  std::string base_dir_;
  bool json_ = false;
  nlohmann::ordered_json report_ = nlohmann::ordered_json::object();
};

Status SelfcheckCommand::RunChecks() {
  ScopedRemoval removal;
  KV_ASSIGN_OR_RETURN(std::string root,
                      MakeScratchTempDir(base_dir_, "kvtier-selfcheck", &removal));
  KV_ASSIGN_OR_RETURN(Fixture f, MakeFixture());
  return Phases(root, f);
}

Status SelfcheckCommand::Phases(const std::string& root, const Fixture& f) {
  StderrLogger logger(CliLogLevel());
  std::unique_ptr<Env> env = NewPosixEnv({.logger = &logger});
  const double mib = static_cast<double>(f.keys.size() * f.payloads[0].size()) / double(kMiB);
  {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> tier, SsdTier::Open(TierOptions(root), env.get()));
    report_["dir"] = root;
    report_["io_backend"] = tier->Stats().io_backend;
    if (!json_) {
      std::printf("SSD tier in %s: 2 directories, I/O backend %s\n", root.c_str(),
                  tier->Stats().io_backend.c_str());
    }
    KV_RETURN_IF_ERROR(WriteAll(*tier, f));
    report_["layout"] = f.layout.ToString();
    report_["blocks_written"] = f.keys.size();
    report_["bytes_written"] = f.keys.size() * f.payloads[0].size();
    if (!json_) {
      std::printf("wrote %zu blocks (%.1f MiB) of layout %s, fdatasync per batch\n",
                  f.keys.size(), mib, f.layout.ToString().c_str());
    }
    KV_RETURN_IF_ERROR(tier->Close());
  }
  {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> tier, SsdTier::Open(TierOptions(root), env.get()));
    const SsdTierStats st = tier->Stats();
    report_["blocks_recovered"] = st.blocks;
    report_["checkpoint_used"] = st.checkpoint_used;
    if (!json_) {
      std::printf("reopened: index recovered %llu blocks (checkpoint %s)\n",
                  static_cast<unsigned long long>(st.blocks),
                  st.checkpoint_used ? "used" : "absent");
    }
    size_t matched = 0, misses = 0;
    KV_RETURN_IF_ERROR(ReadAll(*tier, f, &matched, &misses));
    report_["blocks_read_back_identical"] = matched;
    if (!json_) std::printf("read back %zu/%zu blocks byte-identical\n", matched, f.keys.size());
    if (matched != f.keys.size()) return Status::Corruption("blocks did not read back intact");
    KV_RETURN_IF_ERROR(tier->Close());
  }
  KV_RETURN_IF_ERROR(DamageOneRecord(root + "/ssd0"));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> tier, SsdTier::Open(TierOptions(root), env.get()));
  size_t matched = 0, misses = 0;
  KV_RETURN_IF_ERROR(ReadAll(*tier, f, &matched, &misses));
  const uint64_t corrupt = tier->Stats().corrupt_records;
  report_["damaged_blocks_refused"] = misses;
  report_["corrupt_records"] = corrupt;
  report_["blocks_intact_after_damage"] = matched;
  if (!json_) {
    std::printf(
        "flipped one byte on disk: %zu block refused as a miss (corrupt_records=%llu), "
        "%zu others intact\n",
        misses, static_cast<unsigned long long>(corrupt), matched);
  }
  if (misses != 1 || corrupt != 1 || matched + 1 != f.keys.size()) {
    return Status::Corruption("the damaged block was not detected exactly once");
  }
  return tier->Close();
}

}  // namespace

std::unique_ptr<Command> MakeSelfcheckCommand(CLI::App* app) {
  return std::make_unique<SelfcheckCommand>(app);
}

}  // namespace kvtier::cli
