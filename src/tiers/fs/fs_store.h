// FsStore: the remote tier on a shared file system (an NFS, Lustre or CephFS mount, or a local
// directory), one file per block, for many nodes that share one directory. It is a RemoteStore
// (tiers/remote_store.h), so the engine's remote tier (admission, write budget, I/O threads,
// promotion, stats) runs over it as it runs over Redis; docs/fs_tier.md has the design.
//
// Files: "<dir>/<fan>/<prefix>.<tag>.<rest>", where "<prefix>:{<tag>}:<rest>" is the block's
// remote key name (RemoteKeyName, or SealedKeyName with a keyring: keyed hashes that do not show
// the chunk hash) and <fan> the tag's first two hex digits (256 folders, made at open). A file
// holds a 16-byte file header (kFsFileHeaderBytes) and then the block's remote value: the record
// header and payload, sealed with AES-256-GCM under the keyring, or in the clear with
// insecure_plaintext. An expired value is a miss, and is removed when a read or Exists finds it.
//
// Publishing is atomic: a put writes a temporary ".<name>.tmp.<16 random hex>" beside the file
// (O_EXCL, O_NOFOLLOW), makes it durable (with `fsync`), and renames it over the name; a reader
// sees the whole value or none. A batch writes up to kFsPutGroup temporaries, then makes them
// durable together with one syncfs(2) of the directory's file system (one device flush for the
// group; it also writes back whatever else is dirty on that file system), or, for a single value
// or when syncfs fails, with one fdatasync per value. A get verifies every value (length, header
// and payload CRCs, key, layout digest; with a keyring its GCM tag first) and fails closed to a
// miss, counted as corrupt, mismatched or refused, as RedisStore's gets do.
//
// Eviction: a sweeper thread walks the folders every sweep_interval_ms (with jitter, so nodes do
// not sweep in step), removes values older than max_age_s and, above bytes_max, the oldest until
// the directory holds at most 90 % of it; a get that hits a value older than a sixteenth of
// max_age_s (or one minute) renews its time, so the order is close to least recently used.
// Temporaries a dead writer left are removed after kFsStaleTemporaryS. Several nodes may sweep
// at once: a file another node removed first is skipped, and a file is removed only while it is
// the one that was measured (same inode and time), so a value written again meanwhile stays.
//
// Trust: the directory must be owned by the effective user and writable by no one else (by its
// group too with group_shared), as the SSD tier's directories (env/dir_trust.h). Files are 0600
// (0660 with group_shared); a value with an expiry has no write permission (0400 or 0440), the
// mark that makes Exists read its header (for every other value Exists is one stat). Links and
// other non-regular entries are never followed or read.
//
// Thread safety: safe for concurrent calls. Calls run on the caller's thread (the remote tier's
// I/O threads); the sweeper runs on its own thread from Open to destruction.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "core/logger.h"
#include "core/mutex.h"
#include "core/unique_fd.h"
#include "env/env.h"
#include "tiers/aes_gcm.h"
#include "tiers/fs/fs_options.h"
#include "tiers/remote_crypto.h"
#include "tiers/remote_store.h"

namespace kvtier {

inline constexpr uint64_t kFsStaleTemporaryS = 15 * 60;  // A writer's temporary older than this.
inline constexpr uint32_t kFsFanout = 256;
// Every file opens with "kvtfs1\n\0" and the value's expiry (u64 little-endian wall-clock
// microseconds, 0: none), in the clear so that Exists can tell an expired value without opening
// its seal; Get checks the expiry inside the (sealed) record header.
inline constexpr size_t kFsFileHeaderBytes = 16;
// Values a put writes before it syncs the first of them (so also the descriptors it holds).
inline constexpr size_t kFsPutGroup = 64;

// What the store did beside its RemoteStoreStats.
struct FsStoreStats {
  uint64_t sweeps = 0;
  uint64_t evicted_values = 0;  // Removed for their age or for room.
  uint64_t evicted_bytes = 0;
  uint64_t stale_temporaries = 0;  // Dead writers' temporaries removed.
  uint64_t bytes_seen = 0;         // What the last sweep found in the directory.
  uint64_t values_seen = 0;
  uint64_t group_syncs = 0;  // Groups of values made durable by one syncfs.
  uint64_t value_syncs = 0;  // Values made durable by their own fdatasync.
};

class FsStore final : public RemoteStore {
 public:
  // Validates the options, checks (or creates) the directory and its folders, and starts the
  // sweeper when a bound is set. InvalidArgument names the option or the directory's problem.
  static Result<std::unique_ptr<FsStore>> Open(FsStoreOptions options);
  ~FsStore() override;
  FsStore(const FsStore&) = delete;
  FsStore& operator=(const FsStore&) = delete;

  Status Put(std::span<RemotePut> entries) override;
  Status Get(std::span<RemoteGet> entries) override;
  Status Exists(std::span<RemoteExists> entries) override;
  Status Delete(std::span<RemoteDelete> entries) override;
  RemoteStoreStats Stats() const override;
  // bytes_max, the bytes the last sweep found, and the values the sweeps removed.
  Usage StoreUsage() const override;

  FsStoreStats FsStats() const;
  // Runs one sweep now, on the caller's thread (tests, `kvtier` tools).
  Status SweepNow() KV_EXCLUDES(sweep_mu_);
  // The block's key name: SealedKeyName with a keyring, else RemoteKeyName.
  std::string KeyName(const BlockKey& key) const;
  // The path of a block's file, relative to the directory.
  std::string RelativePath(const BlockKey& key) const;
  // Puts call `syncfs_fn` in place of syncfs(2) from now on, in every store of the process;
  // nullptr restores syncfs. For tests of the fallback to one sync per value.
  static void SetSyncFsForTesting(int (*syncfs_fn)(int));

 private:
  struct Counters;
  explicit FsStore(FsStoreOptions options);
  Status Init();
  void SweeperLoop() KV_EXCLUDES(stop_mu_, sweep_mu_);
  Status SweepLocked() KV_REQUIRES(sweep_mu_);
  // A value being published: its temporary, written and not yet synced or renamed.
  struct PendingPut {
    std::string path, temp, what;
    UniqueFd fd;
  };
  // Writes the value to a new temporary and starts its write-back; on error the temporary is
  // gone. FinishPut syncs it (with `fsync`, unless `synced`: its group's syncfs made it durable),
  // closes it and renames it over the value's name.
  Status BeginPut(RemotePut* e, RemoteCipher* cipher, PendingPut* out);
  Status FinishPut(PendingPut* p, bool synced);
  void AbandonPut(PendingPut* p);  // Closes and removes the temporary.
  void GetOne(RemoteGet* e, RemoteCipher* cipher);
  // Stats a value's file (never following a link) and checks its kind and size.
  Status StatValue(const std::string& path, const std::string& what, struct stat* st);
  Status CheckValueKind(const struct stat& st, const std::string& what) const;
  // Opens a value's file (never a link) and checks its kind and size. Counts nothing.
  Status OpenValue(const std::string& path, const std::string& what, UniqueFd* fd,
                   struct stat* st);
  // Reads the file header: Corruption for a foreign file, NotFound for an expired value (which
  // it removes). Counts nothing.
  Status CheckFileHeader(int fd, const struct stat& st, const std::string& path,
                         const std::string& what);
  uint64_t WallMicros() const;
  Status ReadSealed(int fd, uint64_t size, const std::string& name, const std::string& what,
                    RemoteGet* e, RemoteCipher* cipher,
                    std::span<std::byte, kRemoteValueHeaderBytes> head, size_t* body_bytes);
  Status ReadPlain(int fd, uint64_t body, const std::string& what, RemoteGet* e,
                   std::span<std::byte, kRemoteValueHeaderBytes> head);
  void Touch(int fd, const struct stat& st) const;
  void CountFailure();  // An entry that failed without an answer (an I/O error).

  FsStoreOptions options_;
  UniqueFd dir_fd_;
  uint32_t file_mode_ = 0600;
  std::unique_ptr<Counters> counters_;

  Mutex sweep_mu_;  // One sweep at a time.
  Mutex stop_mu_;
  CondVar stop_cv_;
  bool stop_ KV_GUARDED_BY(stop_mu_) = false;
  std::thread sweeper_;
};

}  // namespace kvtier
