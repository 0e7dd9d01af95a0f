// `kvtier bench remote`: put and get bytes per second of the remote tier on the user's own Redis,
// with sealed values (AES-256-GCM, the default) and with plaintext in alternating rounds, beside
// redis-benchmark's SET and GET with the same value size on the same server (when redis-benchmark
// is on PATH), run once per round (medians): its GET of one key, and its GET over as many
// distinct keys as kvtier's rounds read (-r; the keys it reads are written and removed here).
// With --fs-dir the fs tier is measured on that directory instead, beside plain files of the same
// sizes (written, synced, renamed, read back without checks: the directory's own rate), with
// --cold the values dropped from the page cache before each read. Text, or one JSON object with
// --json.
//
// The deployment keys come from --remote-key-file or the KVTIER_REMOTE_KEY environment variable
// (never from an argument); without either, a fresh random key is used for the run. A Redis
// password comes from KVTIER_REDIS_PASSWORD. Thread safety: the CLI's main thread.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "kvtier/status.h"

namespace kvtier::cli {

class BenchRemote {
 public:
  explicit BenchRemote(CLI::App* bench);
  bool parsed() const { return app_->parsed(); }
  Status Run();

 private:
  CLI::App* app_;
  std::string redis_, fs_dir_, user_, key_file_, sealed_open_ = "as-read", aes_gcm_ = "auto";
  std::string block_text_ = "1MiB", total_text_ = "256MiB";
  uint32_t batch_ = 8, rounds_ = 5, connections_ = 1;
  bool cluster_ = false, json_ = false, no_redis_benchmark_ = false, cold_ = false,
       no_fsync_ = false;
};

}  // namespace kvtier::cli
