// libFuzzer harness for the fs tier's reader (tiers/fs/fs_store.h): a file another node (or an
// attacker with write access to the shared directory) left at a block's path. Any bytes must read
// back as a counted miss (NotFound or Corruption) or as the value that was stored, never crash,
// read outside the file or leave bytes in the caller's buffer on a miss (run under ASan/UBSan).
//
// Input: one mode byte, then the file's bytes. Mode bit 0: the store is sealed with the harness's
// keyring (else plaintext, CRC-checked). Bit 1: the harness first stores a known value through the
// store and then overwrites the start of its file with the input (a mutated real file, so the
// parser gets past the magic and the size checks); otherwise the input is the whole file.
// Each input runs Exists and Get on the block's path in a private temporary directory, removed
// at exit.
// Built by the fuzz preset and, for replay over the corpus, by the asan preset.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/assert.h"
#include "tiers/fs/fs_store.h"
#include "tiers/fs/fuzz/fs_fuzz_block.h"

namespace kvtier {
namespace {

// A store on a private temporary directory, removed at exit with the store.
class Harness {
 public:
  explicit Harness(bool sealed) {
    char tmpl[] = "/tmp/kvtier-fs-fuzz-XXXXXX";
    KV_CHECK(::mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
    Result<std::unique_ptr<FsStore>> store =
        FsStore::Open(fuzz::FsFuzzOptions(dir_ + "/store", sealed));
    KV_CHECK(store.ok());
    store_ = std::move(store).value();
    path_ = dir_ + "/store/" + store_->RelativePath(fuzz::FsFuzzKey());
  }
  ~Harness() {
    store_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  FsStore& store() { return *store_; }
  const std::string& path() const { return path_; }  // The block's file, absolute.

 private:
  std::string dir_;
  std::unique_ptr<FsStore> store_;
  std::string path_;
};

Harness& Get(bool sealed) {
  static Harness plain(false);
  static Harness sealed_store(true);
  return sealed ? sealed_store : plain;
}

void WriteFile(const std::string& path, std::span<const uint8_t> bytes, bool over_existing) {
  ::unlink((path + ".in").c_str());
  const int fd = ::open(over_existing ? path.c_str() : (path + ".in").c_str(),
                        over_existing ? O_WRONLY : (O_WRONLY | O_CREAT | O_EXCL), 0600);
  KV_CHECK(fd >= 0);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    KV_CHECK(n > 0);
    done += static_cast<size_t>(n);
  }
  KV_CHECK(::close(fd) == 0);
  if (!over_existing) KV_CHECK(::rename((path + ".in").c_str(), path.c_str()) == 0);
}

// `stored`: the file is the harness's value with its start overwritten, so a read that verifies
// must give back that value (a seal cannot be forged, nor a CRC matched over other bytes by
// chance); otherwise a read that verifies (a whole valid file from the corpus) fits the buffer.
void ReadBack(FsStore& store, bool stored) {
  RemoteExists exists{.key = fuzz::FsFuzzKey()};
  KV_CHECK(store.Exists(std::span(&exists, 1)).ok());
  KV_CHECK(exists.status.ok());
  std::vector<std::byte> dst(fuzz::kFsFuzzValueBytes + 64, std::byte{0});
  RemoteGet get{.key = fuzz::FsFuzzKey(), .dst = dst};
  KV_CHECK(store.Get(std::span(&get, 1)).ok());
  if (!get.status.ok()) {
    KV_CHECK(get.status.IsNotFound() || get.status.IsCorruption() ||
             get.status.IsInvalidArgument());
    return;
  }
  KV_CHECK(exists.exists);
  KV_CHECK(get.payload_bytes <= dst.size());
  if (stored) {
    KV_CHECK(get.payload_bytes == fuzz::kFsFuzzValueBytes);
    KV_CHECK(std::all_of(dst.begin(), dst.begin() + fuzz::kFsFuzzValueBytes,
                         [](std::byte b) { return b == fuzz::kFsFuzzFill; }));
  }
}

}  // namespace
}  // namespace kvtier

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier;
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::span<const uint8_t> bytes(data + 1, size - 1);
  Harness& h = Get((mode & 1) != 0);
  const bool mutate_real = (mode & 2) != 0;
  ::unlink(h.path().c_str());
  if (mutate_real) {
    KV_CHECK(fuzz::PutFsFuzzValue(h.store()).ok());
    WriteFile(h.path(), bytes, /*over_existing=*/true);
  } else {
    WriteFile(h.path(), bytes, /*over_existing=*/false);
  }
  // An overwrite with the file's own bytes (or none) leaves the stored value intact.
  ReadBack(h.store(), mutate_real);
  ::unlink(h.path().c_str());
  return 0;
}
