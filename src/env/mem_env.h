// MemEnv: an Env whose files and directories live in process memory, for fast unit tests of the
// tiers and the engine (after leveldb's helpers/memenv). Nothing touches the disk, so a test can
// open, fill, reopen and damage an SSD tier in milliseconds and can run anywhere.
//
// It keeps the posix Env's contract (env.h) where callers can tell:
// - open modes, the errors of a missing file or parent directory (NotFound), of an exclusive
//   create that finds a file (InvalidArgument) and of FileKind::kRegular on a directory;
// - reads that come back short only at end of file, writes past the end that leave a zero-filled
//   hole, Truncate, Allocate (which extends the size like fallocate), and a read-only file that
//   refuses writes;
// - O_DIRECT's alignment rules on files opened with DirectIo (direct() is true), or, with
//   MemDirectIo::kRefused, the posix fallback: buffered with one logged line per directory for
//   kPreferred, NotSupported for kRequired;
// - directories made by CreateDirs (parents included), ListDir sorted without "." and "..",
//   RemoveFile, RenameFile that replaces its target, and a removed file that stays readable and
//   writable through the Files still open on it;
// - free space: capacity_bytes less the bytes of every file (removed files count until their last
//   File is gone); a write, Truncate or Allocate that would go past it fails with NoSpace;
// - IoQueues: the thread-pool backend (env/io_queues.h), which runs each request through the
//   File, so completions, depth and short reads behave as on a real disk. IoBackend::kIoUring is
//   NotSupported: an in-memory file has no descriptor (fd() is -1).
// Where it differs: every byte is durable as soon as it is written (Sync and SyncDir only check
// their argument); put a FaultInjectionEnv over it to test power loss. Directory permission bits
// are not kept, and a directory cannot be opened as a File or renamed. Paths are compared after
// folding repeated and trailing slashes; a relative path is relative to "." (always present).
//
// Thread safety: all methods may be called concurrently, and a File may be read and written from
// several threads (as env.h allows). Ownership: Files and IoQueues from this env borrow it and
// must be destroyed before it; the Clock and Logger in the options are borrowed and must outlive
// it.
#pragma once

#include <cstdint>
#include <memory>

#include "core/limits.h"
#include "core/logger.h"
#include "env/env.h"

namespace kvtier {

enum class MemDirectIo : uint8_t {
  kSupported = 0,  // DirectIo::kPreferred and kRequired open direct files.
  kRefused = 1,    // As a filesystem that refuses O_DIRECT (tmpfs before Linux 6.6).
};

struct MemEnvOptions {
  // What FreeSpaceBytes reports with no file written; all files together never grow past it.
  uint64_t capacity_bytes = 1 * kGiB;
  MemDirectIo direct_io = MemDirectIo::kSupported;
  Clock* clock = nullptr;    // Borrowed; nullptr means SystemClock().
  Logger* logger = nullptr;  // Borrowed; receives the O_DIRECT fallback lines. May be nullptr.
};

std::unique_ptr<Env> NewMemEnv(const MemEnvOptions& options = {});

}  // namespace kvtier
