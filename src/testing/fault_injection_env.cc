// FaultInjectionEnv: the shared state (armed faults, counters, per-path sync state), the File and
// IoQueue wrappers that consult it, and the Env that ties them together. See the header for the
// contract.
#include "testing/fault_injection_env.h"

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <utility>

#include "core/assert.h"
#include "core/limits.h"
#include "core/mutex.h"

namespace kvtier {
namespace {

// Old contents saved for power-loss simulation, at most. A test that overwrites more synced data
// than this without a Sync gets NoSpace from the write instead of an unbounded log.
constexpr uint64_t kUndoBytesMax = 256 * kMiB;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string WithoutTrailingSlashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

int ErrnoOf(InjectedError error) { return error == InjectedError::kNoSpace ? ENOSPC : EIO; }

bool KindApplies(FaultKind kind, FaultOp op) {
  switch (kind) {
    case FaultKind::kError:
      return true;
    case FaultKind::kShortTransfer:
      return op == FaultOp::kRead || op == FaultOp::kWrite;
    case FaultKind::kBitFlip:
      return op == FaultOp::kRead;
  }
  return false;
}

bool Matches(const FaultSpec& spec, FaultOp op, const std::string& path) {
  return (spec.op == FaultOp::kAny || spec.op == op) && KindApplies(spec.kind, op) &&
         (spec.path_substring.empty() || path.find(spec.path_substring) != std::string::npos);
}

bool Creates(OpenMode mode) {
  return mode == OpenMode::kCreate || mode == OpenMode::kCreateExclusive ||
         mode == OpenMode::kTruncate;
}

FaultOp FaultOpOf(IoOp op) {
  switch (op) {
    case IoOp::kRead:
      return FaultOp::kRead;
    case IoOp::kWrite:
      return FaultOp::kWrite;
    case IoOp::kSync:
      return FaultOp::kSync;
  }
  return FaultOp::kAny;
}

void FlipBit(std::span<std::byte> bytes, uint64_t bit) {
  if (bytes.empty()) return;
  bit %= bytes.size() * 8;
  bytes[bit / 8] ^= std::byte{static_cast<uint8_t>(1u << (bit % 8))};
}

Status Injected(int error_number, std::string_view what) {
  return Status::FromErrno(error_number, "injected fault: " + std::string(what));
}

// What Decide tells one operation to do.
struct FaultAction {
  int error_number = 0;              // When not 0: fail with this errno, doing nothing.
  std::optional<size_t> keep_bytes;  // Transfer only this prefix.
  int short_error_number = EIO;      // The error of a File::WriteAt cut short.
  std::optional<uint64_t> flip_bit;  // Flip this bit (modulo the bits read) of the data read.
};

}  // namespace

class FaultInjectionState {
 public:
  explicit FaultInjectionState(Env* base) : base_(base) {}

  Result<FaultId> Arm(const FaultSpec& spec) KV_EXCLUDES(mu_);
  void Disarm(FaultId id) KV_EXCLUDES(mu_);
  void DisarmAll() KV_EXCLUDES(mu_);
  uint64_t Fired(FaultId id) const KV_EXCLUDES(mu_);
  FaultOpCounts Counts() const KV_EXCLUDES(mu_);
  void ResetCounts() KV_EXCLUDES(mu_);

  // Counts the operation and returns what the armed faults make of it.
  FaultAction Decide(FaultOp op, const std::string& path, size_t length, bool direct)
      KV_EXCLUDES(mu_);

  // Power-loss bookkeeping. BeforeOpen returns whether the file existed.
  Result<bool> BeforeOpen(const std::string& path, OpenMode mode) KV_EXCLUDES(mu_);
  void AfterOpen(const std::string& path, OpenMode mode, bool existed) KV_EXCLUDES(mu_);
  Status BeforeWrite(const std::string& path, uint64_t offset, uint64_t length) KV_EXCLUDES(mu_);
  Status BeforeTruncate(const std::string& path, uint64_t size_bytes) KV_EXCLUDES(mu_);
  void AfterSync(const std::string& path, File& base_file) KV_EXCLUDES(mu_);
  void AfterRemove(const std::string& path) KV_EXCLUDES(mu_);
  void AfterRename(const std::string& from, const std::string& to) KV_EXCLUDES(mu_);
  void AfterSyncDir(const std::string& dir) KV_EXCLUDES(mu_);
  Status DropUnsyncedData() KV_EXCLUDES(mu_);

 private:
  struct UndoRecord {
    uint64_t offset = 0;
    std::vector<std::byte> bytes;  // The synced contents before an unsynced change.
  };
  struct FileState {
    uint64_t synced_size = 0;
    std::vector<UndoRecord> undo;  // In the order the changes were made.
    std::unique_ptr<File> shadow;  // A buffered base handle for saving and restoring contents.
  };

  Result<File*> ShadowLocked(const std::string& path, FileState& state) KV_REQUIRES(mu_);
  Status SaveUndoLocked(const std::string& path, FileState& state, uint64_t offset, uint64_t length)
      KV_REQUIRES(mu_);
  void ClearUndoLocked(FileState& state) KV_REQUIRES(mu_);
  Status RevertLocked(const std::string& path, FileState& state) KV_REQUIRES(mu_);
  static void Apply(const FaultSpec& spec, uint64_t fired, size_t length, bool direct,
                    FaultAction* action);

  Env* const base_;
  mutable Mutex mu_;
  ArmedFaults<FaultSpec> faults_ KV_GUARDED_BY(mu_);
  FaultOpCounts counts_ KV_GUARDED_BY(mu_);
  std::map<std::string, FileState> files_ KV_GUARDED_BY(mu_);
  std::set<std::string> unsynced_creations_ KV_GUARDED_BY(mu_);
  uint64_t undo_bytes_ KV_GUARDED_BY(mu_) = 0;
};

// ---------------------------------------------------------------------------------------------
// Faults and counters

Result<FaultId> FaultInjectionState::Arm(const FaultSpec& spec) {
  if (spec.op != FaultOp::kAny && !KindApplies(spec.kind, spec.op)) {
    return Status::InvalidArgument("fault kind does not apply to the chosen operation");
  }
  if (spec.kind != FaultKind::kError && spec.op == FaultOp::kAny &&
      !KindApplies(spec.kind, FaultOp::kRead)) {
    return Status::InvalidArgument("fault kind applies to no operation");
  }
  MutexLock lock(&mu_);
  return faults_.Arm(spec);
}

void FaultInjectionState::Disarm(FaultId id) {
  MutexLock lock(&mu_);
  faults_.Disarm(id);
}

void FaultInjectionState::DisarmAll() {
  MutexLock lock(&mu_);
  faults_.DisarmAll();
}

uint64_t FaultInjectionState::Fired(FaultId id) const {
  MutexLock lock(&mu_);
  return faults_.Fired(id);
}

FaultOpCounts FaultInjectionState::Counts() const {
  MutexLock lock(&mu_);
  return counts_;
}

void FaultInjectionState::ResetCounts() {
  MutexLock lock(&mu_);
  counts_ = {};
}

void FaultInjectionState::Apply(const FaultSpec& spec, uint64_t fired, size_t length, bool direct,
                                FaultAction* action) {
  switch (spec.kind) {
    case FaultKind::kError:
      if (action->error_number == 0) action->error_number = ErrnoOf(spec.error);
      break;
    case FaultKind::kShortTransfer: {
      size_t keep = spec.keep_bytes == 0
                        ? length / 2
                        : static_cast<size_t>(std::min<uint64_t>(spec.keep_bytes, length));
      if (direct) keep -= keep % kDirectIoAlignment;
      action->keep_bytes = std::min(action->keep_bytes.value_or(length), keep);
      action->short_error_number = ErrnoOf(spec.error);
      break;
    }
    case FaultKind::kBitFlip:
      action->flip_bit =
          spec.bit_index.has_value() ? *spec.bit_index : SplitMix64(spec.seed + fired);
      break;
  }
}

FaultAction FaultInjectionState::Decide(FaultOp op, const std::string& path, size_t length,
                                        bool direct) {
  FaultAction action;
  MutexLock lock(&mu_);
  switch (op) {
    case FaultOp::kRead:
      ++counts_.reads;
      break;
    case FaultOp::kWrite:
      ++counts_.writes;
      break;
    case FaultOp::kSync:
      ++counts_.syncs;
      break;
    case FaultOp::kOpen:
      ++counts_.opens;
      break;
    case FaultOp::kAny:
      break;
  }
  faults_.Count([&](const FaultSpec& spec) { return Matches(spec, op, path); },
                [&](const FaultSpec& spec, uint64_t fired) {
                  Apply(spec, fired, length, direct, &action);
                });
  return action;
}

// ---------------------------------------------------------------------------------------------
// Power-loss bookkeeping

Result<File*> FaultInjectionState::ShadowLocked(const std::string& path, FileState& state) {
  if (state.shadow == nullptr) {
    KV_ASSIGN_OR_RETURN(state.shadow, base_->OpenFile(path, {.mode = OpenMode::kReadWrite,
                                                             .direct = DirectIo::kOff}));
  }
  return state.shadow.get();
}

Status FaultInjectionState::SaveUndoLocked(const std::string& path, FileState& state,
                                           uint64_t offset, uint64_t length) {
  if (offset >= state.synced_size || length == 0) return Status::Ok();
  const uint64_t size = std::min(offset + length, state.synced_size) - offset;
  if (undo_bytes_ + size > kUndoBytesMax) {
    return Status::NoSpace("FaultInjectionEnv keeps at most " + std::to_string(kUndoBytesMax) +
                           " bytes of unsynced overwrites; sync " + path + " more often");
  }
  KV_ASSIGN_OR_RETURN(File * shadow, ShadowLocked(path, state));
  UndoRecord record{.offset = offset, .bytes = std::vector<std::byte>(size)};
  size_t got = 0;
  KV_RETURN_IF_ERROR(shadow->ReadAt(offset, record.bytes, &got));
  record.bytes.resize(got);
  undo_bytes_ += got;
  state.undo.push_back(std::move(record));
  return Status::Ok();
}

void FaultInjectionState::ClearUndoLocked(FileState& state) {
  for (const UndoRecord& r : state.undo) undo_bytes_ -= r.bytes.size();
  state.undo.clear();
}

Result<bool> FaultInjectionState::BeforeOpen(const std::string& path, OpenMode mode) {
  const bool existed = base_->FileExists(path);
  if (mode == OpenMode::kReadOnly) return existed;
  MutexLock lock(&mu_);
  auto [it, inserted] = files_.try_emplace(path);
  FileState& state = it->second;
  if (inserted && existed) {
    KV_ASSIGN_OR_RETURN(File * shadow, ShadowLocked(path, state));
    KV_ASSIGN_OR_RETURN(state.synced_size, shadow->Size());
  }
  // Emptying a file is an unsynced change like any other.
  if (mode == OpenMode::kTruncate && existed) {
    KV_RETURN_IF_ERROR(SaveUndoLocked(path, state, 0, state.synced_size));
  }
  return existed;
}

void FaultInjectionState::AfterOpen(const std::string& path, OpenMode mode, bool existed) {
  if (existed || !Creates(mode)) return;
  MutexLock lock(&mu_);
  unsynced_creations_.insert(path);
}

Status FaultInjectionState::BeforeWrite(const std::string& path, uint64_t offset, uint64_t length) {
  MutexLock lock(&mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return Status::Ok();  // Opened read-only; the write will fail.
  return SaveUndoLocked(path, it->second, offset, length);
}

Status FaultInjectionState::BeforeTruncate(const std::string& path, uint64_t size_bytes) {
  MutexLock lock(&mu_);
  auto it = files_.find(path);
  if (it == files_.end() || size_bytes >= it->second.synced_size) return Status::Ok();
  return SaveUndoLocked(path, it->second, size_bytes, it->second.synced_size - size_bytes);
}

void FaultInjectionState::AfterSync(const std::string& path, File& base_file) {
  Result<uint64_t> size = base_file.Size();
  if (!size.ok()) return;  // Keep the older, smaller durable state: still a valid outcome.
  MutexLock lock(&mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return;
  it->second.synced_size = *size;
  ClearUndoLocked(it->second);
}

void FaultInjectionState::AfterRemove(const std::string& path) {
  MutexLock lock(&mu_);
  auto it = files_.find(path);
  if (it != files_.end()) {
    ClearUndoLocked(it->second);
    files_.erase(it);
  }
  unsynced_creations_.erase(path);
}

void FaultInjectionState::AfterRename(const std::string& from, const std::string& to) {
  MutexLock lock(&mu_);
  auto old_to = files_.find(to);
  if (old_to != files_.end()) {
    ClearUndoLocked(old_to->second);
    files_.erase(old_to);
  }
  auto node = files_.extract(from);
  if (!node.empty()) {
    node.key() = to;
    files_.insert(std::move(node));
  }
  unsynced_creations_.erase(to);
  if (unsynced_creations_.erase(from) > 0) unsynced_creations_.insert(to);
}

void FaultInjectionState::AfterSyncDir(const std::string& dir) {
  const std::string normalized = WithoutTrailingSlashes(dir);
  MutexLock lock(&mu_);
  std::erase_if(unsynced_creations_,
                [&normalized](const std::string& path) { return DirName(path) == normalized; });
}

Status FaultInjectionState::RevertLocked(const std::string& path, FileState& state) {
  KV_ASSIGN_OR_RETURN(File * shadow, ShadowLocked(path, state));
  // Newest first, so each range ends with the contents it had at the last sync.
  for (auto r = state.undo.rbegin(); r != state.undo.rend(); ++r) {
    KV_RETURN_IF_ERROR(shadow->WriteAt(r->offset, r->bytes));
  }
  ClearUndoLocked(state);
  KV_RETURN_IF_ERROR(shadow->Truncate(state.synced_size));
  return shadow->Sync();
}

Status FaultInjectionState::DropUnsyncedData() {
  MutexLock lock(&mu_);
  Status first_error;
  for (const std::string& path : unsynced_creations_) {
    auto it = files_.find(path);
    if (it != files_.end()) {
      ClearUndoLocked(it->second);
      files_.erase(it);
    }
    Status s = base_->RemoveFile(path);
    if (!s.ok() && !s.IsNotFound() && first_error.ok()) first_error = s;
  }
  unsynced_creations_.clear();
  for (auto it = files_.begin(); it != files_.end();) {
    Status s = RevertLocked(it->first, it->second);
    if (s.IsNotFound()) {  // Removed behind the env's back: nothing to revert.
      ClearUndoLocked(it->second);
      it = files_.erase(it);
      continue;
    }
    if (!s.ok() && first_error.ok()) first_error = s;
    ++it;
  }
  return first_error;
}

// ---------------------------------------------------------------------------------------------
// File

namespace {

class FaultFile final : public FileWrapper {
 public:
  FaultFile(FaultInjectionState* state, std::unique_ptr<File> base)
      : FileWrapper(std::move(base)), state_(state) {}

  Status ReadAt(uint64_t offset, std::span<std::byte> dst, size_t* read_bytes) override;
  Status WriteAt(uint64_t offset, std::span<const std::byte> src) override;
  Status Sync() override;
  Status Truncate(uint64_t size_bytes) override {
    KV_RETURN_IF_ERROR(state_->BeforeTruncate(path(), size_bytes));
    return FileWrapper::Truncate(size_bytes);
  }

 private:
  std::string Where(std::string_view what, uint64_t offset, size_t length) const {
    return std::string(what) + " of " + path() + " at offset " + std::to_string(offset) + " (" +
           std::to_string(length) + " bytes)";
  }

  FaultInjectionState* const state_;
};

Status FaultFile::ReadAt(uint64_t offset, std::span<std::byte> dst, size_t* read_bytes) {
  *read_bytes = 0;
  const FaultAction action = state_->Decide(FaultOp::kRead, path(), dst.size(), direct());
  if (action.error_number != 0)
    return Injected(action.error_number, Where("read", offset, dst.size()));
  const std::span<std::byte> target = dst.first(action.keep_bytes.value_or(dst.size()));
  KV_RETURN_IF_ERROR(FileWrapper::ReadAt(offset, target, read_bytes));
  if (action.flip_bit.has_value()) FlipBit(dst.first(*read_bytes), *action.flip_bit);
  return Status::Ok();
}

Status FaultFile::WriteAt(uint64_t offset, std::span<const std::byte> src) {
  const FaultAction action = state_->Decide(FaultOp::kWrite, path(), src.size(), direct());
  if (action.error_number != 0) {
    return Injected(action.error_number, Where("write", offset, src.size()));
  }
  const std::span<const std::byte> prefix = src.first(action.keep_bytes.value_or(src.size()));
  KV_RETURN_IF_ERROR(state_->BeforeWrite(path(), offset, prefix.size()));
  KV_RETURN_IF_ERROR(FileWrapper::WriteAt(offset, prefix));
  if (prefix.size() < src.size()) {
    // WriteAt writes everything or fails: a torn write is a prefix on disk and an error here.
    return Injected(action.short_error_number, "short " + Where("write", offset, src.size()) +
                                                   ": wrote " + std::to_string(prefix.size()));
  }
  return Status::Ok();
}

Status FaultFile::Sync() {
  const FaultAction action = state_->Decide(FaultOp::kSync, path(), 0, direct());
  if (action.error_number != 0) return Injected(action.error_number, "sync of " + path());
  KV_RETURN_IF_ERROR(FileWrapper::Sync());
  state_->AfterSync(path(), *target());
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// IoQueue

class FaultIoQueue final : public IoQueue {
 public:
  FaultIoQueue(FaultInjectionState* state, std::unique_ptr<IoQueue> base)
      : state_(state), base_(std::move(base)), slots_(base_->depth()), staging_(base_->depth()) {
    free_slots_.reserve(base_->depth());
    for (uint32_t i = 0; i < base_->depth(); ++i) free_slots_.push_back(base_->depth() - 1 - i);
    injected_.reserve(base_->depth());
  }

  std::string_view backend_name() const override { return base_->backend_name(); }
  uint32_t depth() const override { return base_->depth(); }
  uint32_t in_flight() const override {
    return base_->in_flight() + static_cast<uint32_t>(injected_.size());
  }

  Result<size_t> Submit(std::span<const IoRequest> requests) override;
  Result<size_t> Poll(std::span<IoCompletion> out, size_t min_completions,
                      uint64_t timeout_micros) override;

 private:
  struct Slot {
    IoRequest request;  // The caller's request, with its FaultFile and user_data.
    std::optional<uint64_t> flip_bit;
    std::vector<iovec> kept;  // A short gathered write's buffers, cut to the bytes it keeps.
  };

  // Stages `request` for the base queue, or queues an injected completion instead.
  void Stage(const IoRequest& request, size_t* staged);
  void Finish(IoCompletion& c);

  FaultInjectionState* const state_;
  const std::unique_ptr<IoQueue> base_;  // Its destructor waits for requests in flight.
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;    // Capacity depth; never reallocates.
  std::vector<IoRequest> staging_;      // The batch handed to the base queue.
  std::vector<IoCompletion> injected_;  // Completions of failed-by-fault requests; FIFO.
};

void FaultIoQueue::Stage(const IoRequest& request, size_t* staged) {
  auto* file = dynamic_cast<FaultFile*>(request.file);
  KV_CHECK(file != nullptr);  // Files given to this queue must come from the same env.
  const FaultAction action =
      state_->Decide(FaultOpOf(request.op), file->path(), request.length, file->direct());
  IoRequest base_request = request;
  base_request.file = file->target();
  if (request.op != IoOp::kSync) {
    base_request.length = action.keep_bytes.value_or(request.length);
  }
  Status status;
  if (action.error_number != 0) {
    status = Injected(action.error_number, DescribeIoRequest(request));
  } else if (request.op == IoOp::kWrite) {
    status = state_->BeforeWrite(file->path(), request.offset, base_request.length);
  }
  if (!status.ok()) {
    injected_.push_back({.user_data = request.user_data, .status = std::move(status)});
    return;
  }
  KV_CHECK(!free_slots_.empty());
  const uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  slots_[slot] = {.request = request,
                  .flip_bit = request.op == IoOp::kRead ? action.flip_bit : std::nullopt};
  if (!request.gather.empty() && base_request.length < request.length) {
    // A short gathered write: its buffers up to the bytes kept (none kept: an empty write).
    std::vector<iovec>& kept = slots_[slot].kept;
    for (size_t left = base_request.length, i = 0; left > 0; ++i) {
      kept.push_back({request.gather[i].iov_base, std::min(left, request.gather[i].iov_len)});
      left -= kept.back().iov_len;
    }
    base_request.gather = kept;
    if (kept.empty()) base_request.buffer = static_cast<std::byte*>(request.gather[0].iov_base);
  }
  base_request.user_data = slot;
  staging_[(*staged)++] = base_request;
}

Result<size_t> FaultIoQueue::Submit(std::span<const IoRequest> requests) {
  const size_t count = std::min<size_t>(requests.size(), depth() - in_flight());
  for (size_t i = 0; i < count; ++i) KV_RETURN_IF_ERROR(ValidateIoRequest(requests[i]));
  const size_t injected_before = injected_.size();
  size_t staged = 0;
  for (size_t i = 0; i < count; ++i) Stage(requests[i], &staged);
  Result<size_t> accepted = base_->Submit(std::span<const IoRequest>(staging_.data(), staged));
  if (!accepted.ok()) {
    // Nothing of this call was accepted: take back its slots and injected completions.
    for (size_t i = 0; i < staged; ++i) {
      free_slots_.push_back(static_cast<uint32_t>(staging_[i].user_data));
    }
    injected_.resize(injected_before);
    return accepted.status();
  }
  KV_CHECK(*accepted == staged);  // The base had room: in_flight() counts its requests.
  return count;
}

void FaultIoQueue::Finish(IoCompletion& c) {
  KV_CHECK(c.user_data < slots_.size());
  const auto slot = static_cast<uint32_t>(c.user_data);
  const Slot& s = slots_[slot];
  c.user_data = s.request.user_data;
  if (c.status.ok() && s.flip_bit.has_value()) {
    FlipBit(std::span<std::byte>(s.request.buffer, c.bytes), *s.flip_bit);
  }
  if (c.status.ok() && s.request.op == IoOp::kSync) {
    auto* file = static_cast<FaultFile*>(s.request.file);
    state_->AfterSync(file->path(), *file->target());
  }
  free_slots_.push_back(slot);
}

Result<size_t> FaultIoQueue::Poll(std::span<IoCompletion> out, size_t min_completions,
                                  uint64_t timeout_micros) {
  if (in_flight() == 0 || out.empty()) return size_t{0};
  const size_t want = std::min({min_completions, size_t{in_flight()}, out.size()});
  const size_t from_faults = std::min(injected_.size(), out.size());
  std::move(injected_.begin(), injected_.begin() + static_cast<ptrdiff_t>(from_faults),
            out.begin());
  injected_.erase(injected_.begin(), injected_.begin() + static_cast<ptrdiff_t>(from_faults));
  size_t got = from_faults;
  if (got < out.size() && base_->in_flight() > 0) {
    const size_t need = want > got ? want - got : 0;
    KV_ASSIGN_OR_RETURN(const size_t polled,
                        base_->Poll(out.subspan(got), need, need > 0 ? timeout_micros : 0));
    for (size_t i = 0; i < polled; ++i) Finish(out[got + i]);
    got += polled;
  }
  return got;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Env

FaultInjectionEnv::FaultInjectionEnv(Env* base)
    : EnvWrapper(base), state_(std::make_unique<FaultInjectionState>(base)) {}

FaultInjectionEnv::~FaultInjectionEnv() = default;

Result<FaultId> FaultInjectionEnv::ArmFault(const FaultSpec& spec) { return state_->Arm(spec); }
void FaultInjectionEnv::DisarmFault(FaultId id) { state_->Disarm(id); }
void FaultInjectionEnv::DisarmAllFaults() { state_->DisarmAll(); }
uint64_t FaultInjectionEnv::FiredCount(FaultId id) const { return state_->Fired(id); }
FaultOpCounts FaultInjectionEnv::op_counts() const { return state_->Counts(); }
void FaultInjectionEnv::ResetOpCounts() { state_->ResetCounts(); }
Status FaultInjectionEnv::DropUnsyncedData() { return state_->DropUnsyncedData(); }

Result<std::unique_ptr<File>> FaultInjectionEnv::OpenFile(const std::string& path,
                                                          const FileOptions& options) {
  const FaultAction action = state_->Decide(FaultOp::kOpen, path, 0, false);
  if (action.error_number != 0) return Injected(action.error_number, "open " + path);
  KV_ASSIGN_OR_RETURN(const bool existed, state_->BeforeOpen(path, options.mode));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<File> file, target()->OpenFile(path, options));
  state_->AfterOpen(path, options.mode, existed);
  return std::unique_ptr<File>(std::make_unique<FaultFile>(state_.get(), std::move(file)));
}

Result<std::unique_ptr<IoQueue>> FaultInjectionEnv::NewIoQueue(const IoQueueOptions& options) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<IoQueue> queue, target()->NewIoQueue(options));
  return std::unique_ptr<IoQueue>(std::make_unique<FaultIoQueue>(state_.get(), std::move(queue)));
}

Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  KV_RETURN_IF_ERROR(target()->RemoveFile(path));
  state_->AfterRemove(path);
  return Status::Ok();
}

Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  KV_RETURN_IF_ERROR(target()->RenameFile(from, to));
  state_->AfterRename(from, to);
  return Status::Ok();
}

Status FaultInjectionEnv::SyncDir(const std::string& path) {
  KV_RETURN_IF_ERROR(target()->SyncDir(path));
  state_->AfterSyncDir(path);
  return Status::Ok();
}

}  // namespace kvtier
