// FaultInjectionEnv: a test-only Env decorator that injects I/O faults and simulates power loss,
// so crash and failure handling is tested deterministically (after leveldb's fault-injection
// test env and Mooncake's fault proxy).
//
// It wraps a borrowed base Env. Files and IoQueues it returns wrap the base's, so every fault
// applies equally to File methods and to I/O submitted through an IoQueue:
// - errors (EIO or ENOSPC) on the Nth matching operation counted from when the fault was armed,
//   optionally on every matching operation after it too, filtered by operation kind and by a
//   substring of the path;
// - short reads and short writes: only a prefix of the length is transferred (a short write
//   really writes only the prefix). Through an IoQueue this is a completion with fewer bytes; a
//   File::WriteAt, which must write everything or fail, writes the prefix and then fails;
// - one flipped bit in the data a read returns, at a chosen or seeded position.
//
// Power loss: the env remembers, per path, the size at the last successful Sync (File::Sync or a
// completed IoOp::kSync) and the old contents of synced ranges overwritten since (read through
// the base before each write). DropUnsyncedData() reverts every file to that state, and removes
// files created through this env whose directory was not SyncDir'ed after the creation. A file
// the env has not seen before counts as synced as it is found when first opened for writing.
// Renames carry a file's state to the new name; removal forgets it.
//
// Thread safety: all methods may be called concurrently; faults can be armed and disarmed while
// I/O runs. DropUnsyncedData must not run while writes are in flight. The returned IoQueues keep
// IoQueue's single-owner-thread rule.
//
// Ownership: the base Env is borrowed and must outlive this env. Files and IoQueues from this env
// borrow it and must be destroyed before it. Files given to its IoQueues must come from this env.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "env/env.h"
#include "env/env_wrapper.h"
#include "testing/armed_faults.h"

namespace kvtier {

enum class FaultOp : uint8_t { kRead = 0, kWrite = 1, kSync = 2, kOpen = 3, kAny = 4 };

enum class FaultKind : uint8_t {
  kError = 0,          // The operation fails without doing anything.
  kShortTransfer = 1,  // Reads and writes move only a prefix.
  kBitFlip = 2,        // Reads return one bit flipped.
};

enum class InjectedError : uint8_t { kIo = 0, kNoSpace = 1 };  // EIO, ENOSPC.

struct FaultSpec {
  FaultKind kind = FaultKind::kError;
  // Which operations count. Short transfers apply to reads and writes only, bit flips to reads
  // only; kAny means every operation the kind applies to.
  FaultOp op = FaultOp::kAny;
  std::string path_substring = {};  // Only paths containing it count; empty matches every path.
  uint64_t nth = 1;                 // 1 means the next matching operation.
  FaultRepeat repeat = FaultRepeat::kOnce;
  // kError: the errno injected. kShortTransfer: the error a File::WriteAt returns after writing
  // its prefix.
  InjectedError error = InjectedError::kIo;
  // kShortTransfer: bytes transferred, at most the length; 0 means half the length. Rounded down
  // to kDirectIoAlignment for O_DIRECT files so the prefix is still a valid transfer.
  uint64_t keep_bytes = 0;
  // kBitFlip: the bit to flip, counted from the first byte read and taken modulo the bits read;
  // when empty, a position drawn from `seed` (and the firing count, so repeats differ).
  std::optional<uint64_t> bit_index = std::nullopt;
  uint64_t seed = 0;
};

// Operations seen since construction or ResetOpCounts, whether or not a fault fired. IoQueue
// requests count like the File methods they mirror.
struct FaultOpCounts {
  uint64_t reads = 0;
  uint64_t writes = 0;
  uint64_t syncs = 0;
  uint64_t opens = 0;
};

class FaultInjectionState;  // The shared state behind the env, its files and queues.

class FaultInjectionEnv final : public EnvWrapper {
 public:
  explicit FaultInjectionEnv(Env* base);
  ~FaultInjectionEnv() override;

  FaultInjectionEnv(const FaultInjectionEnv&) = delete;
  FaultInjectionEnv& operator=(const FaultInjectionEnv&) = delete;

  // Arms a fault and returns its id. InvalidArgument for nth == 0, a kind that can't apply to
  // `op`, or more than 64 armed faults at once.
  Result<FaultId> ArmFault(const FaultSpec& spec);
  // Unknown ids are ignored.
  void DisarmFault(FaultId id);
  void DisarmAllFaults();
  // How many operations the fault has affected; 0 for an unknown (or disarmed) id.
  uint64_t FiredCount(FaultId id) const;

  FaultOpCounts op_counts() const;
  void ResetOpCounts();

  // Simulates a power loss: reverts every file to its last synced state and removes files whose
  // creation was not made durable by SyncDir. Open Files stay usable afterwards.
  Status DropUnsyncedData();

  // Env: the calls that can fail by fault or change what survives a power loss. The rest
  // (CreateDirs, ListDir, FileExists, FreeSpaceBytes, clock, logger) go to the base unchanged.
  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override;
  Result<std::unique_ptr<IoQueue>> NewIoQueue(const IoQueueOptions& options) override;
  Status RemoveFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& path) override;

 private:
  std::unique_ptr<FaultInjectionState> state_;
};

}  // namespace kvtier
