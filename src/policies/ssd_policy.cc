// See ssd_policy.h.
#include "policies/ssd_policy.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace kvtier::ssd {
namespace {

// Two independent 64-bit words of the (already uniform) chunk hash, mixed with the layer.
uint64_t SlotHash(const BlockKey& key, int i) {
  uint64_t h;
  std::memcpy(&h, key.chunk_hash.data() + 8 * i, sizeof(h));
  h ^= (uint64_t{key.layer} + 1) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 29);
}

}  // namespace

AdmissionFilter::AdmissionFilter(uint32_t threshold, uint32_t slots)
    : threshold_(threshold), mask_(std::bit_ceil(std::max<uint64_t>(slots, 64)) - 1) {
  counters_.assign(mask_ + 1, 0);
}

uint32_t AdmissionFilter::EstimateLocked(const BlockKey& key) const {
  uint32_t est = UINT32_MAX;
  for (int i = 0; i < kHashes; ++i)
    est = std::min<uint32_t>(est, counters_[SlotHash(key, i) & mask_]);
  return est;
}

void AdmissionFilter::IncrementLocked(const BlockKey& key) {
  for (int i = 0; i < kHashes; ++i) {
    uint8_t& c = counters_[SlotHash(key, i) & mask_];
    if (c < UINT8_MAX) ++c;
  }
  // Aging: after as many increments as there are counters, halve them all, so old popularity
  // fades and the sketch never saturates.
  if (++increments_ >= counters_.size()) {
    for (uint8_t& c : counters_) c = static_cast<uint8_t>(c >> 1);
    increments_ = 0;
  }
}

void AdmissionFilter::Record(const BlockKey& key) {
  if (threshold_ <= 1) return;
  MutexLock lock(&mu_);
  IncrementLocked(key);
}

bool AdmissionFilter::RecordAndAdmit(const BlockKey& key) {
  if (threshold_ <= 1) return true;
  MutexLock lock(&mu_);
  IncrementLocked(key);
  return EstimateLocked(key) >= threshold_;
}

WriteBudget::WriteBudget(uint64_t bytes_per_s, uint64_t burst_bytes, uint64_t now_micros)
    : bytes_per_s_(bytes_per_s),
      burst_bytes_(burst_bytes != 0 ? burst_bytes : bytes_per_s),
      tokens_(burst_bytes_),
      last_micros_(now_micros) {}

bool WriteBudget::TryTake(uint64_t bytes, uint64_t now_micros) {
  if (bytes_per_s_ == 0) return true;
  MutexLock lock(&mu_);
  const uint64_t now = now_micros;
  if (now > last_micros_) {
    const unsigned __int128 add =
        static_cast<unsigned __int128>(now - last_micros_) * bytes_per_s_ / 1'000'000u;
    tokens_ = static_cast<uint64_t>(std::min<unsigned __int128>(burst_bytes_, tokens_ + add));
    last_micros_ = now;
  }
  if (tokens_ < bytes) return false;
  tokens_ -= bytes;
  return true;
}

}  // namespace kvtier::ssd
