// The block fs_file_fuzzer reads and its seeds (tests/fuzz/make_seeds.cc) are written from: one
// key, one known value, and the store's options, sealed with the harness's key or in the clear.
// Shared so that the seeds are files of exactly the block the harness looks up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/block_key.h"
#include "kvtier/status.h"
#include "tiers/fs/fs_store.h"
#include "tiers/remote_crypto.h"

namespace kvtier::fuzz {

inline constexpr uint32_t kFsFuzzValueBytes = 512;
inline constexpr std::byte kFsFuzzFill{0x5a};  // Every byte of the known value.

inline BlockKey FsFuzzKey() {
  BlockKey key;
  for (size_t i = 0; i < key.chunk_hash.size(); ++i) {
    key.chunk_hash[i] = static_cast<uint8_t>(i * 7 + 1);
  }
  key.layer = 3;
  return key;
}

// A store on `dir` (no sync: the files are scratch), sealed with key id 7 or in the clear.
inline FsStoreOptions FsFuzzOptions(std::string dir, bool sealed) {
  FsStoreOptions o;
  o.dir = std::move(dir);
  o.fsync = false;
  if (sealed) {
    o.keyring = RemoteKeyring::Parse(
                    "7 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n")
                    .value();
  } else {
    o.insecure_plaintext = true;
  }
  return o;
}

// Puts the known value under FsFuzzKey().
inline Status PutFsFuzzValue(FsStore& store) {
  const std::vector<std::byte> payload(kFsFuzzValueBytes, kFsFuzzFill);
  RemotePut put{.key = FsFuzzKey(), .codec_id = 0, .raw_bytes = kFsFuzzValueBytes,
                .payload = payload};
  KV_RETURN_IF_ERROR(store.Put(std::span(&put, 1)));
  return put.status;
}

}  // namespace kvtier::fuzz
