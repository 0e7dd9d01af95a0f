// `kvtier bench ssd` and `kvtier bench ssd-reopen`: measure the SSD tier on the user's own disk.
// `bench ssd` writes and then cold-reads a run of equal blocks with a fixed number in flight, the
// same shape as an fio sequential job, so bench/ssd_vs_fio.sh can quote the tier against the
// disk's own limit. `bench ssd-reopen` times recovery of a filled tier with and without its
// checkpoint. Both work in fresh subdirectories that they remove (`bench ssd --keep` keeps them,
// for the CLI test); a --dir that does not exist is created, and removed again. Figures are
// printed as text, or as one JSON object with --json. `bench ssd`, `ssd-reopen` and `decode`
// show a progress line on stderr, and Ctrl-C stops them: their scratch data is removed and the
// exit status is 130. `bench decode`, `remote`, `codec` and `engine` live in bench_<name>.cc;
// this file only dispatches.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "bench_codec.h"
#include "bench_model_quality.h"
#include "bench_decode.h"
#include "bench_engine.h"
#include "bench_remote.h"
#include "byte_size.h"
#include "command.h"
#include "core/limits.h"
#include "core/logger.h"
#include "env/env.h"
#include "interrupt.h"
#include "progress.h"
#include "tiers/ssd/ssd_tools.h"
#include "json_output.h"

namespace kvtier::cli {
namespace {

std::string Mbps(double bytes_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f MB/s", bytes_per_s / 1e6);
  return buf;
}

void PrintSsd(const ssd::BenchSsdReport& r, bool json) {
  if (!json) {
    std::printf(
        "SSD tier, %llu blocks of %llu bytes, queue depth %llu, %s, O_DIRECT %s, "
        "sync %s\n",
        static_cast<unsigned long long>(r.blocks), static_cast<unsigned long long>(r.block_bytes),
        static_cast<unsigned long long>(r.queue_depth), r.io_backend.c_str(),
        r.direct_io ? "on" : "off", r.sync_mode.c_str());
    std::printf("write %s (%.2f s incl. final sync)\nreopen %.1f ms\n",
                Mbps(r.write_bytes_per_s).c_str(), r.write_s, r.reopen_ms);
    std::printf("read  %s (%.2f s), per block p50 %.0f us, p99 %.0f us, max %.0f us\n",
                Mbps(r.read_bytes_per_s).c_str(), r.read_s, r.read_p50_us, r.read_p99_us,
                r.read_max_us);
    for (const std::string& d : r.kept_dirs) std::printf("kept %s\n", d.c_str());
    return;
  }
  nlohmann::ordered_json j;
  j["write_bytes_per_s"] = r.write_bytes_per_s;
  j["read_bytes_per_s"] = r.read_bytes_per_s;
  j["read_p50_us"] = r.read_p50_us;
  j["read_p99_us"] = r.read_p99_us;
  j["read_max_us"] = r.read_max_us;
  j["block_bytes"] = r.block_bytes;
  j["payload_bytes"] = r.payload_bytes;
  j["queue_depth"] = r.queue_depth;
  j["total_bytes"] = r.total_bytes;
  j["blocks"] = r.blocks;
  j["io_backend"] = r.io_backend;
  j["direct_io"] = r.direct_io;
  j["sync_mode"] = r.sync_mode;
  j["write_s"] = r.write_s;
  j["read_s"] = r.read_s;
  j["reopen_ms"] = r.reopen_ms;
  j["kept_dirs"] = r.kept_dirs;
  std::printf("%s\n", JsonText(j, 2).c_str());
}

void PrintReopen(const ssd::BenchReopenReport& r, bool json) {
  if (!json) {
    std::printf(
        "SSD tier with %llu blocks of %llu payload bytes (%.0f MiB of segments, filled "
        "in %.1f s)\nreopen with checkpoint %.1f ms, without (full scan) %.1f ms\n",
        static_cast<unsigned long long>(r.blocks), static_cast<unsigned long long>(r.payload_bytes),
        static_cast<double>(r.disk_bytes) / double(kMiB), r.fill_s, r.reopen_checkpoint_ms,
        r.reopen_scan_ms);
    return;
  }
  nlohmann::ordered_json j;
  j["blocks"] = r.blocks;
  j["payload_bytes"] = r.payload_bytes;
  j["disk_bytes"] = r.disk_bytes;
  j["fill_s"] = r.fill_s;
  j["reopen_checkpoint_ms"] = r.reopen_checkpoint_ms;
  j["reopen_scan_ms"] = r.reopen_scan_ms;
  j["recovered_checkpoint"] = r.recovered_checkpoint;
  j["recovered_scan"] = r.recovered_scan;
  j["checkpoint_used"] = r.checkpoint_used;
  std::printf("%s\n", JsonText(j, 2).c_str());
}

class BenchCommand final : public Command {
 public:
  explicit BenchCommand(CLI::App* app)
      : Command(app->add_subcommand(
            "bench", "Measure the SSD tier, long-context decode, the remote tier, the codecs and "
                     "the engine")) {
    ssd_ = subcommand()->add_subcommand(
        "ssd", "Write then cold-read equal blocks with a fixed queue depth (like fio)");
    ssd_->add_option("--dir", dirs_, "Directory to test in; repeat to stripe (required)")
        ->required();
    ssd_->add_option("--block-bytes", block_text_, "Bytes per block on disk (default 1MiB)");
    ssd_->add_option("--queue-depth", queue_depth_, "Blocks in flight, 1..256 (default 16)");
    ssd_->add_option("--total-bytes", total_text_, "Bytes to write and read (default 1GiB)");
    ssd_->add_flag("--json", json_, "Print one JSON object");
    ssd_->add_flag("--keep", keep_, "Keep the cache directory (for tests)")->group("");
    reopen_ = subcommand()->add_subcommand(
        "ssd-reopen", "Time reopening a filled tier with and without its checkpoint");
    reopen_->add_option("--dir", reopen_dirs_, "Directory to test in (required)")->required();
    reopen_->add_option("--blocks", blocks_, "Blocks to fill (default 100000)");
    reopen_->add_option("--payload-bytes", payload_text_, "Payload per block (default 4KiB)");
    reopen_->add_flag("--json", json_, "Print one JSON object");
    decode_ = std::make_unique<BenchDecode>(subcommand());
    remote_ = std::make_unique<BenchRemote>(subcommand());
    codec_ = std::make_unique<BenchCodec>(subcommand());
    quality_ = std::make_unique<BenchQuality>(subcommand());
    engine_ = std::make_unique<BenchEngine>(subcommand());
  }

  int Run() override;

 private:
  int RunSsd(Env* env);
  int RunReopen(Env* env);
  // The exit status of a benchmark that returned `s`: 130 after Ctrl-C.
  int Finish(const Status& s);

  CLI::App* ssd_ = nullptr;
  CLI::App* reopen_ = nullptr;
  std::unique_ptr<BenchDecode> decode_;
  std::unique_ptr<BenchRemote> remote_;
  std::unique_ptr<BenchCodec> codec_;
  std::unique_ptr<BenchQuality> quality_;
  std::unique_ptr<BenchEngine> engine_;
  std::vector<std::string> dirs_, reopen_dirs_;
  std::string block_text_ = "1MiB", total_text_ = "1GiB", payload_text_ = "4KiB";
  uint32_t queue_depth_ = 16;
  uint64_t blocks_ = 100'000;
  bool json_ = false, keep_ = false;
};

int BenchCommand::Run() {
  StderrLogger logger(CliLogLevel());
  std::unique_ptr<Env> env = NewPosixEnv({.logger = &logger});
  // The long benchmarks stop at Ctrl-C (bench remote keeps the default: it has nothing to
  // remove). Their scratch data is gone by the time Run*() returns.
  const char* long_bench = ssd_->parsed()      ? "bench ssd"
                           : reopen_->parsed() ? "bench ssd-reopen"
                           : decode_->parsed() ? "bench decode"
                                               : nullptr;
  if (long_bench != nullptr) {
    InstallInterruptHandler();
    int rc = kExitOk;
    if (ssd_->parsed()) {
      rc = RunSsd(env.get());
    } else if (reopen_->parsed()) {
      rc = RunReopen(env.get());
    } else if (const Status s = decode_->Run(); !s.ok()) {
      rc = Interrupted() ? kExitInterrupted : Fail(s);
    }
    if (rc == kExitInterrupted) {
      PrintInterrupted(long_bench, "its scratch files were removed");
      return kExitInterrupted;
    }
    return rc;
  }
  if (remote_->parsed()) {
    const Status s = remote_->Run();
    return s.ok() ? kExitOk : Fail(s);
  }
  if (codec_->parsed()) return Finish(codec_->Run());
  if (quality_->parsed()) return Finish(quality_->Run());
  if (engine_->parsed()) return Finish(engine_->Run());
  return Fail(Status::InvalidArgument(
      "name what to measure: ssd, ssd-reopen, decode, remote, codec or engine"));
}

int BenchCommand::Finish(const Status& s) {
  if (s.ok()) return kExitOk;
  if (Interrupted()) {
    PrintInterrupted("bench", "scratch data removed");
    return kExitInterrupted;
  }
  return Fail(s);
}

int BenchCommand::RunSsd(Env* env) {
  ssd::BenchSsdOptions o{.dirs = dirs_, .queue_depth = queue_depth_, .keep_dirs = keep_};
  Result<uint64_t> block = ParseBytes("--block-bytes", block_text_);
  if (!block.ok()) return Fail(block.status());
  Result<uint64_t> total = ParseBytes("--total-bytes", total_text_);
  if (!total.ok()) return Fail(total.status());
  o.block_bytes = *block;
  o.total_bytes = *total;
  ScopedRemoval removal;
  for (const std::string& dir : dirs_) {
    if (Status s = CreateScratchDir(dir, &removal); !s.ok()) return Fail(s);
  }
  // Written then read back: one line, its label naming the phase.
  Progress progress("bench ssd write", 0, ProgressUnit::kBytes);
  o.progress = [&progress](uint64_t done, uint64_t all) {
    progress.SetTotal(all);
    if (done > all / 2) progress.SetLabel("bench ssd read");
    progress.Update(done);
  };
  o.cancelled = Interrupted;
  Result<ssd::BenchSsdReport> r = ssd::BenchSsd(env, o);
  progress.Finish();
  if (!r.ok()) return Interrupted() ? kExitInterrupted : Fail(r.status());
  if (keep_) removal.Keep();
  PrintSsd(*r, json_);
  return kExitOk;
}

int BenchCommand::RunReopen(Env* env) {
  Result<uint64_t> payload = ParseBytes("--payload-bytes", payload_text_);
  if (!payload.ok()) return Fail(payload.status());
  if (*payload == 0 || *payload > ssd::kBenchBlockBytesMax) {
    return Fail(Status::InvalidArgument("--payload-bytes: must be 1 B..64 MiB"));
  }
  ssd::BenchReopenOptions o{
      .dirs = reopen_dirs_, .blocks = blocks_, .payload_bytes = static_cast<uint32_t>(*payload)};
  ScopedRemoval removal;
  for (const std::string& dir : reopen_dirs_) {
    if (Status s = CreateScratchDir(dir, &removal); !s.ok()) return Fail(s);
  }
  Progress progress("bench ssd-reopen fill", blocks_, ProgressUnit::kCount, "blocks");
  o.progress = [&progress](uint64_t done, uint64_t) { progress.Update(done); };
  o.cancelled = Interrupted;
  Result<ssd::BenchReopenReport> r = ssd::BenchReopen(env, o);
  progress.Finish();
  if (!r.ok()) return Interrupted() ? kExitInterrupted : Fail(r.status());
  PrintReopen(*r, json_);
  return kExitOk;
}

}  // namespace

std::unique_ptr<Command> MakeBenchCommand(CLI::App* app) {
  return std::make_unique<BenchCommand>(app);
}

}  // namespace kvtier::cli
