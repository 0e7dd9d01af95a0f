// RatioMonitor: a rolling window of compression ratios (raw bytes / encoded bytes) per
// (codec, layer). When the coefficient of variation (population stddev / mean) of a full enough
// window exceeds the threshold (15 % by default), it raises an event: the observer passed in the
// options is called and the events counter in Stats() goes up.
//
// Why: a codec's ratio on one layer is stable for a given model; a jump in its spread means the
// data drifted (a new tenant, a different model behind the same layout) or a codec bug.
// Events are edge-triggered: one event when a window goes above the threshold, re-armed once it
// comes back to or below it, so a persistent condition does not flood the observer.
//
// Thread safety: all methods may be called concurrently. The observer is called on the thread
// that recorded the sample, without the monitor's lock held (it may call Stats()). Memory is
// bounded: at most keys_max windows of window_samples doubles each; samples for further keys are
// counted as dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "codecs/codec_params.h"
#include "core/mutex.h"
#include "kvtier/result.h"

namespace kvtier::codecs {

inline constexpr size_t kRatioWindowSamplesMax = 4096;
inline constexpr size_t kRatioKeysMax = 1u << 16;

struct RatioEvent {
  CodecId codec;
  uint32_t layer;
  double ratio_mean;
  double ratio_cv;
  size_t samples;
};

struct RatioMonitorOptions {
  size_t window_samples = 64;  // 2..kRatioWindowSamplesMax.
  size_t samples_min = 16;     // The CV is judged once a window has this many (2..window).
  double cv_max = 0.15;        // > 0.
  size_t keys_max = 4096;      // (codec, layer) windows kept, 1..kRatioKeysMax.
  std::function<void(const RatioEvent&)> on_event = nullptr;  // May be empty.

  Status Validate() const;
};

struct RatioMonitorStats {
  uint64_t samples_total = 0;
  uint64_t samples_dropped = 0;  // Zero encoded size, or a key beyond keys_max.
  uint64_t events_total = 0;
  size_t keys = 0;
};

struct RatioWindowStats {
  double ratio_mean = 0;
  double ratio_cv = 0;
  size_t samples = 0;
};

class RatioMonitor {
 public:
  // InvalidArgument for invalid options.
  static Result<std::unique_ptr<RatioMonitor>> Create(RatioMonitorOptions options);

  RatioMonitor(const RatioMonitor&) = delete;
  RatioMonitor& operator=(const RatioMonitor&) = delete;

  void Record(CodecId codec, uint32_t layer, uint64_t raw_bytes, uint64_t encoded_bytes)
      KV_EXCLUDES(mu_);
  RatioMonitorStats Stats() const KV_EXCLUDES(mu_);
  // NotFound when no sample was recorded for (codec, layer).
  Result<RatioWindowStats> Window(CodecId codec, uint32_t layer) const KV_EXCLUDES(mu_);

 private:
  struct Ring {
    std::vector<double> ratios;  // window_samples slots.
    size_t next = 0;
    size_t count = 0;
    bool alarmed = false;
  };
  using Key = std::pair<uint8_t, uint32_t>;

  explicit RatioMonitor(RatioMonitorOptions options) : options_(std::move(options)) {}
  static RatioWindowStats Summarize(const Ring& ring);

  const RatioMonitorOptions options_;
  mutable Mutex mu_;
  std::map<Key, Ring> rings_ KV_GUARDED_BY(mu_);
  RatioMonitorStats stats_ KV_GUARDED_BY(mu_);
};

}  // namespace kvtier::codecs
