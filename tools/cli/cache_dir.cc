// See cache_dir.h. Everything goes through the project's Env, as the SSD tier's own I/O does.
#include "cache_dir.h"


#include <memory>
#include <string>

#include "core/aligned_buffer.h"
#include "core/limits.h"
#include "env/dir_trust.h"
#include "env/env.h"

namespace kvtier::cli {
namespace {

// One block created, written and synced, then removed: what the SSD tier does first with a new
// segment.
// The probe's name is unpredictable and it is created O_EXCL|O_NOFOLLOW, so nothing planted in
// the directory beforehand is followed or truncated.
Status WriteProbe(Env& env, const std::string& dir) {
  KV_ASSIGN_OR_RETURN(const std::string path, UniqueTempPath(dir + "/.kvtier-probe"));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<File> file,
                      env.OpenFile(path, {.mode = OpenMode::kCreateExclusive,
                                          .kind = FileKind::kRegular,
                                          .create_mode = 0600,
                                          .links = Links::kRefuse}));
  KV_ASSIGN_OR_RETURN(AlignedBuffer block, AlignedBuffer::Allocate(kDirectIoAlignment));
  Status s = file->WriteAt(0, block.span());
  if (s.ok()) s = file->Sync();
  file.reset();
  env.RemoveFile(path).IgnoreError();  // Best effort: a leftover probe is harmless.
  return s;
}

}  // namespace

Status CheckCacheDirUsable(const std::string& dir, uint64_t free_bytes_min) {
  if (dir.empty()) return Status::InvalidArgument("--cache-dir is empty");
  const std::unique_ptr<Env> env = NewPosixEnv();
  const auto unusable = [&](const Status& why) {
    return why.WithContext("cache directory " + dir + " cannot be used");
  };
  Status s = env->CreateDirs(dir, 0700);
  // Owner and others are checked here; whether the group may write it depends on ssd_file_mode,
  // which the tier checks when it takes the directory's LOCK.
  if (s.ok()) s = OpenTrustedDir(dir, GroupWrite::kAllow).status();
  if (s.ok()) s = WriteProbe(*env, dir);
  if (!s.ok()) return unusable(s);
  Result<uint64_t> free_bytes = env->FreeSpaceBytes(dir);
  if (!free_bytes.ok()) return unusable(free_bytes.status());
  if (*free_bytes < free_bytes_min) {
    return unusable(Status::NoSpace("no space left on device: " + std::to_string(*free_bytes) +
                                    " bytes free, at least " + std::to_string(free_bytes_min) +
                                    " needed"));
  }
  return Status::Ok();
}

}  // namespace kvtier::cli
