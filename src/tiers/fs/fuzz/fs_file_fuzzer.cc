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
#include "tiers/remote_crypto.h"

namespace kvtier {
namespace {

constexpr uint32_t kValueBytes = 512;
constexpr std::byte kFill{0x5a};

BlockKey FuzzKey() {
  BlockKey key;
  for (size_t i = 0; i < key.chunk_hash.size(); ++i) {
    key.chunk_hash[i] = static_cast<uint8_t>(i * 7 + 1);
  }
  key.layer = 3;
  return key;
}

// A store on a private temporary directory, removed at exit with the store.
class Harness {
 public:
  explicit Harness(bool sealed) {
    char tmpl[] = "/tmp/kvtier-fs-fuzz-XXXXXX";
    KV_CHECK(::mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
    FsStoreOptions o;
    o.dir = dir_ + "/store";
    o.fsync = false;
    if (sealed) {
      o.keyring = std::move(RemoteKeyring::Parse(
          "7 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n").value());
    } else {
      o.insecure_plaintext = true;
    }
    Result<std::unique_ptr<FsStore>> store = FsStore::Open(std::move(o));
    KV_CHECK(store.ok());
    store_ = std::move(store).value();
    path_ = dir_ + "/store/" + store_->RelativePath(FuzzKey());
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

void StoreKnownValue(FsStore& store) {
  const std::vector<std::byte> payload(kValueBytes, kFill);
  RemotePut put{.key = FuzzKey(), .codec_id = 0, .raw_bytes = kValueBytes, .payload = payload};
  KV_CHECK(store.Put(std::span(&put, 1)).ok());
  KV_CHECK(put.status.ok());
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
  RemoteExists exists{.key = FuzzKey()};
  KV_CHECK(store.Exists(std::span(&exists, 1)).ok());
  KV_CHECK(exists.status.ok());
  std::vector<std::byte> dst(kValueBytes + 64, std::byte{0});
  RemoteGet get{.key = FuzzKey(), .dst = dst};
  KV_CHECK(store.Get(std::span(&get, 1)).ok());
  if (!get.status.ok()) {
    KV_CHECK(get.status.IsNotFound() || get.status.IsCorruption() ||
             get.status.IsInvalidArgument());
    return;
  }
  KV_CHECK(exists.exists);
  KV_CHECK(get.payload_bytes <= dst.size());
  if (stored) {
    KV_CHECK(get.payload_bytes == kValueBytes);
    KV_CHECK(std::all_of(dst.begin(), dst.begin() + kValueBytes,
                         [](std::byte b) { return b == kFill; }));
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
    StoreKnownValue(h.store());
    WriteFile(h.path(), bytes, /*over_existing=*/true);
  } else {
    WriteFile(h.path(), bytes, /*over_existing=*/false);
  }
  // An overwrite with the file's own bytes (or none) leaves the stored value intact.
  ReadBack(h.store(), mutate_real);
  ::unlink(h.path().c_str());
  return 0;
}
