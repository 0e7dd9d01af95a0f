// FsStore (tiers/fs/fs_store.h): remote values as files of a shared directory, published by
// rename, verified on every read, swept by age and size.
#include "tiers/fs/fs_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <set>
#include <utility>
#include <vector>

#include "core/coding.h"
#include "core/hex.h"
#include "env/dir_trust.h"

namespace kvtier {

struct FsStore::Counters {
  std::atomic<uint64_t> gets{0}, hits{0}, misses{0}, corrupt{0}, mismatched{0}, auth_failures{0},
      puts{0}, errors{0};
  std::atomic<uint64_t> group_syncs{0}, value_syncs{0};
  std::atomic<uint64_t> sweeps{0}, evicted_values{0}, evicted_bytes{0}, stale_temporaries{0},
      bytes_seen{0}, values_seen{0};
};

namespace {

// syncfs(2), or what a test put in its place (FsStore::SetSyncFsForTesting).
std::atomic<int (*)(int)> g_syncfs{&::syncfs};

constexpr uint64_t kValueBytesMax =
    kRemoteValueHeaderBytes + kRemoteValueBytesMax + kSealedOverheadBytes;
constexpr std::array<char, 8> kFileMagic = {'k', 'v', 't', 'f', 's', '1', '\n', '\0'};
constexpr uint64_t kTouchIntervalMaxS = 60;  // A hit renews a value older than this at most.
constexpr double kSweepLowWater = 0.9;       // Above bytes_max, sweep down to this fraction.

bool PrefixOk(std::string_view p) {
  if (p.empty() || p.size() > kRemoteKeyPrefixBytesMax) return false;
  return std::all_of(p.begin(), p.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

// "<prefix>:{<tag>}:<rest>" -> "<fan>/<prefix>.<tag>.<rest>".
std::string PathOfKeyName(std::string_view name) {
  const size_t open = name.find('{');
  const size_t close = name.find('}', open);
  const std::string_view prefix = name.substr(0, open - 1);
  const std::string_view tag = name.substr(open + 1, close - open - 1);
  const std::string_view rest = name.substr(close + 2);
  std::string out;
  out.reserve(name.size() + 3);
  out.append(tag.substr(0, 2)).append("/").append(prefix).append(".").append(tag);
  out.append(".").append(rest);
  return out;
}

std::string FanName(uint32_t i) {
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string{kHex[i >> 4], kHex[i & 15]};
}

Result<std::string> RandomHex16() {
  std::array<uint8_t, 8> bytes{};
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::FromErrno(errno, "fs tier: getrandom");
    got += static_cast<size_t>(n);
  }
  return HexOf(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

Status WriteAll(int fd, std::span<const std::span<const std::byte>> parts,
                const std::string& what) {
  for (std::span<const std::byte> part : parts) {
    while (!part.empty()) {
      const ssize_t n = ::write(fd, part.data(), part.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::FromErrno(errno, what);
      part = part.subspan(static_cast<size_t>(n));
    }
  }
  return Status::Ok();
}

// Reads exactly dst.size() bytes at `offset`; false when the file is shorter (it changed).
Result<bool> ReadExactly(int fd, std::span<std::byte> dst, uint64_t offset,
                         const std::string& what) {
  while (!dst.empty()) {
    const ssize_t n = ::pread(fd, dst.data(), dst.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, what);
    if (n == 0) return false;
    dst = dst.subspan(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

uint64_t WallSeconds() { return static_cast<uint64_t>(::time(nullptr)); }

struct Found {
  std::string path;  // Relative to the directory.
  uint64_t bytes = 0;
  ino_t ino = 0;
  timespec mtime{};
};

Status CheckBatch(size_t entries) {
  if (entries <= kRemoteBatchMax) return Status::Ok();
  return Status::InvalidArgument("fs tier: more than " + std::to_string(kRemoteBatchMax) +
                                 " entries in one call");
}

bool SameFile(const struct stat& st, const Found& f) {
  return st.st_ino == f.ino && st.st_mtim.tv_sec == f.mtime.tv_sec &&
         st.st_mtim.tv_nsec == f.mtime.tv_nsec;
}

}  // namespace

Status FsStoreOptions::Validate() const {
  if (dir.empty()) return Status::InvalidArgument("fs_dir: empty");
  if (!PrefixOk(key_prefix)) {
    return Status::InvalidArgument("fs tier key_prefix '" + key_prefix +
                                   "': 1 to 64 letters, digits, '_' or '-'");
  }
  if (keyring.has_value() && insecure_plaintext) {
    return Status::InvalidArgument(
        "fs tier: deployment keys and insecure_plaintext are exclusive; give one");
  }
  if (!keyring.has_value() && !insecure_plaintext) {
    return Status::InvalidArgument(
        "fs tier: needs deployment keys (remote_key_file: values sealed with AES-256-GCM, names "
        "hashed) or remote_insecure_plaintext for a directory nobody else can read or write");
  }
  if (keyring.has_value() && keyring->empty()) {
    return Status::InvalidArgument("fs tier: the keyring holds no key");
  }
  if (aes_gcm.has_value() && !GcmImplAvailable(*aes_gcm)) {
    return Status::InvalidArgument("fs tier: the AES-GCM implementation is not available here");
  }
  if (sweep_interval_ms == 0) return Status::InvalidArgument("fs_sweep_interval_ms: must be > 0");
  return Status::Ok();
}

Result<std::unique_ptr<FsStore>> FsStore::Open(FsStoreOptions options) {
  KV_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<FsStore> store(new FsStore(std::move(options)));
  KV_RETURN_IF_ERROR(store->Init());
  return store;
}

FsStore::FsStore(FsStoreOptions options)
    : options_(std::move(options)), counters_(std::make_unique<Counters>()) {
  file_mode_ = options_.group_shared ? 0660 : 0600;
}

FsStore::~FsStore() {
  {
    MutexLock lock(&stop_mu_);
    stop_ = true;
  }
  stop_cv_.SignalAll();
  if (sweeper_.joinable()) sweeper_.join();
}

Status FsStore::Init() {
  const std::string& dir = options_.dir;
  const GroupWrite group = options_.group_shared ? GroupWrite::kAllow : GroupWrite::kRefuse;
  const mode_t dir_mode = options_.group_shared ? 0770 : 0700;
  const bool made = ::mkdir(dir.c_str(), dir_mode) == 0;
  if (!made && errno != EEXIST) {
    return Status::FromErrno(errno, "fs_dir " + dir + ": cannot create");
  }
  Result<UniqueFd> fd = OpenTrustedDir(dir, group);
  if (!fd.ok()) return fd.status().WithContext("fs_dir");
  dir_fd_ = std::move(*fd);
  if (made) ::fchmod(dir_fd_.get(), dir_mode);  // Past the umask (best effort).
  for (uint32_t i = 0; i < kFsFanout; ++i) {
    const std::string fan = FanName(i);
    if (::mkdirat(dir_fd_.get(), fan.c_str(), dir_mode) == 0) {
      const UniqueFd made_fan(
          ::openat(dir_fd_.get(), fan.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (made_fan.valid()) ::fchmod(made_fan.get(), dir_mode);  // Past the umask.
    } else if (errno != EEXIST) {
      return Status::FromErrno(errno, "fs_dir " + dir + "/" + fan + ": cannot create");
    }
    struct stat st {};
    if (::fstatat(dir_fd_.get(), fan.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return Status::FromErrno(errno, "fs_dir " + dir + "/" + fan);
    }
    KV_RETURN_IF_ERROR(CheckDirTrust(dir + "/" + fan, st, ::geteuid(), group));
    if (!S_ISDIR(st.st_mode)) {
      return Status::InvalidArgument("fs_dir " + dir + "/" + fan + " is " +
                                     FileKindName(st.st_mode) + ", not a directory");
    }
  }
  if (options_.bytes_max != 0 || options_.max_age_s != 0) {
    sweeper_ = std::thread([this] { SweeperLoop(); });
  }
  return Status::Ok();
}

std::string FsStore::KeyName(const BlockKey& key) const {
  return options_.keyring.has_value() ? SealedKeyName(options_.key_prefix, *options_.keyring, key)
                                      : RemoteKeyName(options_.key_prefix, key);
}

std::string FsStore::RelativePath(const BlockKey& key) const { return PathOfKeyName(KeyName(key)); }

void FsStore::CountFailure() { counters_->errors.fetch_add(1, std::memory_order_relaxed); }

Status FsStore::Put(std::span<RemotePut> entries) {
  KV_RETURN_IF_ERROR(CheckBatch(entries.size()));
  for (const RemotePut& e : entries) {
    if (e.payload.size() > kRemoteValueBytesMax) {
      return Status::InvalidArgument("fs tier: a value larger than " +
                                     std::to_string(kRemoteValueBytesMax) + " bytes");
    }
  }
  RemoteCipher cipher(options_.aes_gcm.value_or(DefaultGcmImpl()));
  // In groups: every temporary of a group is written (and its write-back started) before any is
  // synced. A group of two or more values is then made durable by one syncfs(2) of the
  // directory's file system (one journal commit and one device flush, where a sync per file
  // flushes the device once per value); when syncfs fails, each value is synced on its own, so
  // an error is the failing value's own. Every value is durable before its rename. The group
  // bounds the descriptors held at once.
  std::vector<PendingPut> group;
  group.reserve(std::min(entries.size(), kFsPutGroup));
  for (size_t first = 0; first < entries.size(); first += kFsPutGroup) {
    const size_t end = std::min(entries.size(), first + kFsPutGroup);
    group.clear();
    size_t begun = 0;
    for (size_t i = first; i < end; ++i) {
      group.emplace_back();
      entries[i].status = BeginPut(&entries[i], &cipher, &group.back());
      if (entries[i].status.ok()) ++begun;
    }
    bool synced = false;
    if (options_.fsync && begun >= 2) {
      synced = g_syncfs.load(std::memory_order_relaxed)(dir_fd_.get()) == 0;
      if (synced) counters_->group_syncs.fetch_add(1, std::memory_order_relaxed);
    }
    for (size_t i = first; i < end; ++i) {
      RemotePut& e = entries[i];
      if (e.status.ok()) e.status = FinishPut(&group[i - first], synced);
      if (e.status.ok()) {
        counters_->puts.fetch_add(1, std::memory_order_relaxed);
      } else {
        CountFailure();
      }
    }
  }
  return Status::Ok();
}

Status FsStore::BeginPut(RemotePut* e, RemoteCipher* cipher, PendingPut* out) {
  const std::string name = KeyName(e->key);
  out->path = PathOfKeyName(name);
  const uint64_t expiry_us = e->ttl_ms == 0 ? 0 : WallMicros() + e->ttl_ms * 1000;
  const RemoteValueInfo info{.key = e->key,
                             .layout_digest = options_.layout_digest,
                             .codec_id = e->codec_id,
                             .raw_bytes = e->raw_bytes,
                             .expiry_wall_us = expiry_us};
  std::array<std::byte, kRemoteValueHeaderBytes> head;
  EncodeRemoteValueHeader(info, e->payload, head);
  std::array<std::byte, kFsFileHeaderBytes> file_header{};
  std::memcpy(file_header.data(), kFileMagic.data(), kFileMagic.size());
  EncodeFixed64(file_header.data() + kFileMagic.size(), expiry_us);
  thread_local std::vector<std::byte> sealed;  // Reused: a value's pages are faulted in once.
  std::array<std::span<const std::byte>, 3> parts{std::span<const std::byte>(file_header),
                                                  std::span<const std::byte>(head), e->payload};
  size_t part_count = 3;
  if (options_.keyring.has_value()) {
    KV_RETURN_IF_ERROR(SealRemoteValue(*options_.keyring, name, head, e->payload, &sealed, cipher));
    parts[1] = sealed;
    part_count = 2;
  }
  const std::string& path = out->path;
  const size_t slash = path.find('/');
  KV_ASSIGN_OR_RETURN(const std::string random, RandomHex16());
  out->temp = path.substr(0, slash + 1) + "." + path.substr(slash + 1) + ".tmp." + random;
  out->what = "fs tier: " + options_.dir + "/" + out->temp;
  out->fd = UniqueFd(::openat(dir_fd_.get(), out->temp.c_str(),
                              O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, file_mode_));
  if (!out->fd.valid()) return Status::FromErrno(errno, out->what);
  // The mode exactly, whatever the umask: group_shared nodes of one group read each other's. A
  // value with an expiry gets no write permission: the mark that lets Exists skip the header
  // of every other value (the descriptor open for writing keeps its own access).
  const mode_t mode = expiry_us == 0 ? file_mode_ : (file_mode_ & ~mode_t{0222});
  Status s = ::fchmod(out->fd.get(), mode) == 0 ? Status::Ok()
                                                : Status::FromErrno(errno, out->what + ": fchmod");
  if (s.ok()) s = WriteAll(out->fd.get(), std::span(parts.data(), part_count), out->what);
  if (s.ok() && options_.fsync) {
    // Starts the write-back now; FinishPut's fdatasync waits for it. Only a hint: a file system
    // without it (EINVAL, ENOSYS, ESPIPE) is synced by fdatasync alone.
    ::sync_file_range(out->fd.get(), 0, 0, SYNC_FILE_RANGE_WRITE);
  }
  if (!s.ok()) AbandonPut(out);
  return s;
}

Status FsStore::FinishPut(PendingPut* p, bool synced) {
  Status s = Status::Ok();
  if (options_.fsync && !synced) {
    counters_->value_syncs.fetch_add(1, std::memory_order_relaxed);
    if (::fdatasync(p->fd.get()) != 0) s = Status::FromErrno(errno, p->what + ": fdatasync");
  }
  if (s.ok()) s = p->fd.Close();
  if (s.ok() && ::renameat(dir_fd_.get(), p->temp.c_str(), dir_fd_.get(), p->path.c_str()) != 0) {
    s = Status::FromErrno(errno, p->what + ": rename to " + p->path);
  }
  if (!s.ok()) AbandonPut(p);
  return s;
}

void FsStore::AbandonPut(PendingPut* p) {
  p->fd.Reset();
  ::unlinkat(dir_fd_.get(), p->temp.c_str(), 0);
}

Status FsStore::Get(std::span<RemoteGet> entries) {
  KV_RETURN_IF_ERROR(CheckBatch(entries.size()));
  RemoteCipher cipher(options_.aes_gcm.value_or(DefaultGcmImpl()));
  for (RemoteGet& e : entries) {
    counters_->gets.fetch_add(1, std::memory_order_relaxed);
    GetOne(&e, &cipher);
    if (e.status.ok()) {
      counters_->hits.fetch_add(1, std::memory_order_relaxed);
    } else if (e.status.IsNotFound() || e.status.IsCorruption()) {
      counters_->misses.fetch_add(1, std::memory_order_relaxed);
    } else if (!e.status.IsInvalidArgument()) {
      CountFailure();
    }
    // Nothing that was not verified stays in the caller's buffer.
    if (!e.status.ok() && !e.dst.empty()) std::memset(e.dst.data(), 0, e.dst.size());
  }
  return Status::Ok();
}

Status FsStore::StatValue(const std::string& path, const std::string& what, struct stat* st) {
  if (::fstatat(dir_fd_.get(), path.c_str(), st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Status::NotFound("fs tier: miss");
    return Status::FromErrno(errno, what);
  }
  if (S_ISLNK(st->st_mode)) return Status::Corruption(what + " is a symbolic link; not followed");
  return CheckValueKind(*st, what);
}

Status FsStore::OpenValue(const std::string& path, const std::string& what, UniqueFd* fd,
                          struct stat* st) {
  // O_NONBLOCK: a FIFO planted in a value's place (between a lookup's stat and this open) would
  // make the open wait for a writer, holding the load forever; CheckValueKind refuses it
  // instead. Reads of a regular file ignore the flag.
  *fd = UniqueFd(::openat(dir_fd_.get(), path.c_str(),
                          O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd->valid()) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("fs tier: miss");
    if (err == ELOOP) return Status::Corruption(what + " is a symbolic link; not followed");
    return Status::FromErrno(err, what);
  }
  if (::fstat(fd->get(), st) != 0) return Status::FromErrno(errno, what);
  return CheckValueKind(*st, what);
}

Status FsStore::CheckValueKind(const struct stat& st, const std::string& what) const {
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t sealed_extra = options_.keyring.has_value() ? kSealedOverheadBytes : 0;
  if (!S_ISREG(st.st_mode) || size < kFsFileHeaderBytes + kRemoteValueHeaderBytes + sealed_extra ||
      size > kFsFileHeaderBytes + kValueBytesMax) {
    return Status::Corruption(what + ": not a value (" + std::to_string(size) + " bytes)");
  }
  return Status::Ok();
}

uint64_t FsStore::WallMicros() const {
  return (options_.clock != nullptr ? options_.clock : SystemClock())->WallMicros();
}

Status FsStore::CheckFileHeader(int fd, const struct stat& st, const std::string& path,
                                const std::string& what) {
  std::array<std::byte, kFsFileHeaderBytes> h;
  KV_ASSIGN_OR_RETURN(const bool whole, ReadExactly(fd, h, 0, what));
  if (!whole || std::memcmp(h.data(), kFileMagic.data(), kFileMagic.size()) != 0) {
    return Status::Corruption(what + ": not a kvtier fs tier file");
  }
  const uint64_t expiry_us = DecodeFixed64(h.data() + kFileMagic.size());
  if (expiry_us == 0 || WallMicros() < expiry_us) return Status::Ok();
  // Expired: removed while it is still this file (another node may have written it again).
  struct stat now {};
  if (::fstatat(dir_fd_.get(), path.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
      now.st_ino == st.st_ino) {
    ::unlinkat(dir_fd_.get(), path.c_str(), 0);
  }
  return Status::NotFound("fs tier: expired");
}

// Reads the whole sealed value and opens it straight into e->dst (its header into `head`).
// Corruption for a short file or a refused value; *body_bytes is the payload's length.
Status FsStore::ReadSealed(int fd, uint64_t size, const std::string& name, const std::string& what,
                           RemoteGet* e, RemoteCipher* cipher,
                           std::span<std::byte, kRemoteValueHeaderBytes> head, size_t* body_bytes) {
  // Read into a buffer reused by this thread, then opened into the caller's: reading the
  // ciphertext into the caller's buffer and opening it in place measured slower (1 MiB values
  // from the page cache: 6.7-7.4 GB/s against 8.8-8.9, `kvtier bench remote --fs-dir`).
  thread_local std::vector<std::byte> value;
  value.resize(size);
  KV_ASSIGN_OR_RETURN(const bool whole, ReadExactly(fd, value, kFsFileHeaderBytes, what));
  if (!whole) {
    counters_->corrupt.fetch_add(1, std::memory_order_relaxed);
    return Status::Corruption(what + ": shorter than when opened");
  }
  uint32_t key_id = 0;
  const Status opened = OpenRemoteValueInto(*options_.keyring, name, value, head, e->dst,
                                            body_bytes, &key_id, cipher);
  if (!opened.ok()) {
    counters_->auth_failures.fetch_add(1, std::memory_order_relaxed);
    return Status::Corruption("fs tier value refused: " + opened.message());
  }
  return Status::Ok();
}

// Reads a plaintext value: its header into `head`, its `body` bytes of payload into e->dst.
Status FsStore::ReadPlain(int fd, uint64_t body, const std::string& what, RemoteGet* e,
                          std::span<std::byte, kRemoteValueHeaderBytes> head) {
  KV_ASSIGN_OR_RETURN(bool whole, ReadExactly(fd, head, kFsFileHeaderBytes, what));
  if (whole) {
    KV_ASSIGN_OR_RETURN(whole, ReadExactly(fd, e->dst.first(body),
                                           kFsFileHeaderBytes + kRemoteValueHeaderBytes, what));
  }
  if (!whole) {
    counters_->corrupt.fetch_add(1, std::memory_order_relaxed);
    return Status::Corruption(what + ": shorter than when opened");
  }
  return Status::Ok();
}

void FsStore::GetOne(RemoteGet* e, RemoteCipher* cipher) {
  const std::string name = KeyName(e->key);
  const std::string path = PathOfKeyName(name);
  const std::string what = "fs tier: " + options_.dir + "/" + path;
  UniqueFd fd;
  struct stat st {};
  e->status = OpenValue(path, what, &fd, &st);
  if (e->status.ok()) e->status = CheckFileHeader(fd.get(), st, path, what);
  if (e->status.IsCorruption()) counters_->corrupt.fetch_add(1, std::memory_order_relaxed);
  if (!e->status.ok()) return;
  const uint64_t size = static_cast<uint64_t>(st.st_size) - kFsFileHeaderBytes;
  const uint64_t sealed_extra = options_.keyring.has_value() ? kSealedOverheadBytes : 0;
  const uint64_t body = size - kRemoteValueHeaderBytes - sealed_extra;
  if (body > e->dst.size()) {
    e->status = Status::InvalidArgument("fs tier get: destination smaller than the value");
    return;
  }
  std::array<std::byte, kRemoteValueHeaderBytes> head;
  ssd::RecordHeader header;
  RemoteValueCheck check = RemoteValueCheck::kOk;
  Status verified;
  if (options_.keyring.has_value()) {
    size_t body_bytes = 0;
    e->status = ReadSealed(fd.get(), size, name, what, e, cipher, head, &body_bytes);
    if (!e->status.ok()) return;
    // The GCM tag has authenticated every byte; the header says whose value it is.
    verified = VerifyRemoteHeader(head, kRemoteValueHeaderBytes + body_bytes, e->key,
                                  options_.layout_digest, &header, &check);
  } else {
    e->status = ReadPlain(fd.get(), body, what, e, head);
    if (!e->status.ok()) return;
    verified = VerifyRemoteValueParts(head, e->dst.first(body), e->key, options_.layout_digest,
                                      &header, &check);
  }
  if (check == RemoteValueCheck::kCorrupt) {
    counters_->corrupt.fetch_add(1, std::memory_order_relaxed);
  }
  if (check == RemoteValueCheck::kMismatched) {
    counters_->mismatched.fetch_add(1, std::memory_order_relaxed);
  }
  if (!verified.ok()) {
    e->status = Status::Corruption(what + ": " + verified.message());
    return;
  }
  e->codec_id = header.codec_id;
  e->raw_bytes = header.raw_bytes;
  e->payload_bytes = header.payload_bytes;
  Touch(fd.get(), st);
}

// A hit renews the value's time, so the sweeps remove the least recently used first; at most
// once per touch interval, so hot values cost no metadata write per read.
void FsStore::Touch(int fd, const struct stat& st) const {
  const uint64_t touch_s = options_.max_age_s == 0
                               ? kTouchIntervalMaxS
                               : std::min<uint64_t>(kTouchIntervalMaxS, options_.max_age_s / 16);
  if (WallSeconds() >= static_cast<uint64_t>(st.st_mtim.tv_sec) + touch_s) {
    ::futimens(fd, nullptr);  // Best effort: a read-only mount keeps the old time.
  }
}

Status FsStore::Exists(std::span<RemoteExists> entries) {
  KV_RETURN_IF_ERROR(CheckBatch(entries.size()));
  for (RemoteExists& e : entries) {
    // One stat: a regular file of a possible size is there (the read checks the rest). A value
    // with an expiry was published without write permission; only its header is read here, so
    // an expired value is not there.
    const std::string path = RelativePath(e.key);
    const std::string what = "fs tier: " + options_.dir + "/" + path;
    struct stat st {};
    Status s = StatValue(path, what, &st);
    if (s.ok() && (st.st_mode & S_IWUSR) == 0) {
      UniqueFd fd;
      s = OpenValue(path, what, &fd, &st);
      if (s.ok()) s = CheckFileHeader(fd.get(), st, path, what);
    }
    e.exists = s.ok();
    e.status = s.ok() || s.IsNotFound() || s.IsCorruption() ? Status::Ok() : s;
    if (!e.status.ok()) CountFailure();
  }
  return Status::Ok();
}

Status FsStore::Delete(std::span<RemoteDelete> entries) {
  KV_RETURN_IF_ERROR(CheckBatch(entries.size()));
  for (RemoteDelete& e : entries) {
    const std::string path = RelativePath(e.key);
    if (::unlinkat(dir_fd_.get(), path.c_str(), 0) == 0 || errno == ENOENT) {
      e.status = Status::Ok();
    } else {
      e.status = Status::FromErrno(errno, "fs tier: " + options_.dir + "/" + path);
      CountFailure();
    }
  }
  return Status::Ok();
}

RemoteStoreStats FsStore::Stats() const {
  const Counters& c = *counters_;
  RemoteStoreStats s;
  s.gets = c.gets.load(std::memory_order_relaxed);
  s.hits = c.hits.load(std::memory_order_relaxed);
  s.misses = c.misses.load(std::memory_order_relaxed);
  s.corrupt = c.corrupt.load(std::memory_order_relaxed);
  s.mismatched = c.mismatched.load(std::memory_order_relaxed);
  s.auth_failures = c.auth_failures.load(std::memory_order_relaxed);
  s.puts = c.puts.load(std::memory_order_relaxed);
  s.errors = c.errors.load(std::memory_order_relaxed);
  return s;
}

RemoteStore::Usage FsStore::StoreUsage() const {
  return {.capacity_bytes = options_.bytes_max,
          .used_bytes = counters_->bytes_seen.load(std::memory_order_relaxed),
          .removed = counters_->evicted_values.load(std::memory_order_relaxed)};
}

FsStoreStats FsStore::FsStats() const {
  const Counters& c = *counters_;
  return {.sweeps = c.sweeps.load(std::memory_order_relaxed),
          .evicted_values = c.evicted_values.load(std::memory_order_relaxed),
          .evicted_bytes = c.evicted_bytes.load(std::memory_order_relaxed),
          .stale_temporaries = c.stale_temporaries.load(std::memory_order_relaxed),
          .bytes_seen = c.bytes_seen.load(std::memory_order_relaxed),
          .values_seen = c.values_seen.load(std::memory_order_relaxed),
          .group_syncs = c.group_syncs.load(std::memory_order_relaxed),
          .value_syncs = c.value_syncs.load(std::memory_order_relaxed)};
}

void FsStore::SetSyncFsForTesting(int (*syncfs_fn)(int)) {
  g_syncfs.store(syncfs_fn != nullptr ? syncfs_fn : &::syncfs, std::memory_order_relaxed);
}

Status FsStore::SweepNow() {
  MutexLock lock(&sweep_mu_);
  return SweepLocked();
}

Status FsStore::SweepLocked() {
  const uint64_t now_s = WallSeconds();
  std::vector<Found> values;
  uint64_t total = 0;
  Counters& c = *counters_;
  for (uint32_t i = 0; i < kFsFanout; ++i) {
    const std::string fan = FanName(i);
    const int fd =
        ::openat(dir_fd_.get(), fan.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;  // Removed or replaced by hand: nothing of ours to sweep there.
    DIR* d = ::fdopendir(fd);
    if (d == nullptr) {
      ::close(fd);
      continue;
    }
    while (const dirent* ent = ::readdir(d)) {
      const std::string_view name(ent->d_name);
      if (name == "." || name == "..") continue;
      struct stat st {};
      if (::fstatat(fd, ent->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
        continue;
      }
      const uint64_t mtime = static_cast<uint64_t>(st.st_mtim.tv_sec);
      if (name.starts_with(".")) {  // A writer's temporary.
        if (name.find(".tmp.") != std::string_view::npos && now_s > mtime + kFsStaleTemporaryS &&
            ::unlinkat(fd, ent->d_name, 0) == 0) {
          c.stale_temporaries.fetch_add(1, std::memory_order_relaxed);
        }
        continue;
      }
      values.push_back(Found{.path = fan + "/" + std::string(name),
                             .bytes = static_cast<uint64_t>(st.st_size),
                             .ino = st.st_ino,
                             .mtime = st.st_mtim});
      total += static_cast<uint64_t>(st.st_size);
    }
    ::closedir(d);
  }
  c.sweeps.fetch_add(1, std::memory_order_relaxed);
  c.values_seen.store(values.size(), std::memory_order_relaxed);
  c.bytes_seen.store(total, std::memory_order_relaxed);
  std::sort(values.begin(), values.end(), [](const Found& a, const Found& b) {
    return std::pair(a.mtime.tv_sec, a.mtime.tv_nsec) < std::pair(b.mtime.tv_sec, b.mtime.tv_nsec);
  });
  const uint64_t low_water =
      static_cast<uint64_t>(static_cast<double>(options_.bytes_max) * kSweepLowWater);
  const bool over = options_.bytes_max != 0 && total > options_.bytes_max;
  uint64_t removed = 0, removed_bytes = 0;
  for (const Found& f : values) {
    const bool old = options_.max_age_s != 0 &&
                     now_s > static_cast<uint64_t>(f.mtime.tv_sec) + options_.max_age_s;
    const bool for_room = over && total > low_water;
    if (!old && !for_room) break;  // Sorted oldest first: the rest are younger.
    // Removed only while it is the file that was measured: a value written again since (a new
    // inode) or renewed by a hit (a new time) stays.
    struct stat st {};
    if (::fstatat(dir_fd_.get(), f.path.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !SameFile(st, f)) {
      total -= std::min(total, f.bytes);
      continue;
    }
    if (::unlinkat(dir_fd_.get(), f.path.c_str(), 0) == 0) {
      ++removed;
      removed_bytes += f.bytes;
    }
    total -= std::min(total, f.bytes);  // Removed here or by another node meanwhile.
  }
  c.evicted_values.fetch_add(removed, std::memory_order_relaxed);
  c.evicted_bytes.fetch_add(removed_bytes, std::memory_order_relaxed);
  if (removed != 0) {
    LogTo(options_.logger, LogLevel::kInfo,
          "fs tier: swept " + options_.dir + ": removed " + std::to_string(removed) + " values (" +
              std::to_string(removed_bytes) + " bytes) of " + std::to_string(values.size()));
  }
  return Status::Ok();
}

void FsStore::SweeperLoop() {
  // The first sweep after a random part of one interval, so nodes that started together do not
  // sweep in step.
  uint64_t jitter = 0;
  if (Result<std::string> r = RandomHex16(); r.ok()) {
    jitter = std::stoull(r->substr(0, 8), nullptr, 16);
  }
  auto wait = std::chrono::milliseconds(jitter % options_.sweep_interval_ms);
  while (true) {
    {
      MutexLock lock(&stop_mu_);
      const auto deadline = std::chrono::steady_clock::now() + wait;
      while (!stop_ && std::chrono::steady_clock::now() < deadline) {
        stop_cv_.WaitFor(&stop_mu_, deadline - std::chrono::steady_clock::now());
      }
      if (stop_) return;
    }
    {
      MutexLock lock(&sweep_mu_);
      const Status s = SweepLocked();
      if (!s.ok()) LogTo(options_.logger, LogLevel::kWarn, "fs tier: sweep: " + s.ToString());
    }
    wait = std::chrono::milliseconds(options_.sweep_interval_ms);
  }
}

}  // namespace kvtier
