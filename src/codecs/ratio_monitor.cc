#include "codecs/ratio_monitor.h"

#include <cmath>
#include <optional>

namespace kvtier::codecs {

Status RatioMonitorOptions::Validate() const {
  if (window_samples < 2 || window_samples > kRatioWindowSamplesMax) {
    return Status::InvalidArgument("ratio monitor: window_samples must be in [2, 4096]");
  }
  if (samples_min < 2 || samples_min > window_samples) {
    return Status::InvalidArgument("ratio monitor: samples_min must be in [2, window_samples]");
  }
  if (!(cv_max > 0) || std::isinf(cv_max)) {
    return Status::InvalidArgument("ratio monitor: cv_max must be positive and finite");
  }
  if (keys_max < 1 || keys_max > kRatioKeysMax) {
    return Status::InvalidArgument("ratio monitor: keys_max must be in [1, 65536]");
  }
  return Status::Ok();
}

Result<std::unique_ptr<RatioMonitor>> RatioMonitor::Create(RatioMonitorOptions options) {
  KV_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<RatioMonitor>(new RatioMonitor(std::move(options)));
}

RatioWindowStats RatioMonitor::Summarize(const Ring& ring) {
  RatioWindowStats s;
  s.samples = ring.count;
  if (ring.count == 0) return s;
  double sum = 0;
  for (size_t i = 0; i < ring.count; ++i) sum += ring.ratios[i];
  s.ratio_mean = sum / static_cast<double>(ring.count);
  double var = 0;
  for (size_t i = 0; i < ring.count; ++i) {
    const double d = ring.ratios[i] - s.ratio_mean;
    var += d * d;
  }
  var /= static_cast<double>(ring.count);
  s.ratio_cv = s.ratio_mean > 0 ? std::sqrt(var) / s.ratio_mean : 0;
  return s;
}

void RatioMonitor::Record(CodecId codec, uint32_t layer, uint64_t raw_bytes,
                          uint64_t encoded_bytes) {
  std::optional<RatioEvent> event;
  {
    MutexLock lock(&mu_);
    ++stats_.samples_total;
    const Key key{static_cast<uint8_t>(codec), layer};
    auto it = rings_.find(key);
    if (encoded_bytes == 0 || (it == rings_.end() && rings_.size() >= options_.keys_max)) {
      ++stats_.samples_dropped;
      return;
    }
    if (it == rings_.end()) {
      it = rings_.emplace(key, Ring{.ratios = std::vector<double>(options_.window_samples)}).first;
      stats_.keys = rings_.size();
    }
    Ring& ring = it->second;
    ring.ratios[ring.next] = static_cast<double>(raw_bytes) / static_cast<double>(encoded_bytes);
    ring.next = (ring.next + 1) % ring.ratios.size();
    if (ring.count < ring.ratios.size()) ++ring.count;
    if (ring.count < options_.samples_min) return;
    const RatioWindowStats s = Summarize(ring);
    const bool above = s.ratio_cv > options_.cv_max;
    if (above && !ring.alarmed) {
      ++stats_.events_total;
      event = RatioEvent{.codec = codec,
                         .layer = layer,
                         .ratio_mean = s.ratio_mean,
                         .ratio_cv = s.ratio_cv,
                         .samples = s.samples};
    }
    ring.alarmed = above;
  }
  if (event.has_value() && options_.on_event) options_.on_event(*event);
}

RatioMonitorStats RatioMonitor::Stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

Result<RatioWindowStats> RatioMonitor::Window(CodecId codec, uint32_t layer) const {
  MutexLock lock(&mu_);
  auto it = rings_.find(Key{static_cast<uint8_t>(codec), layer});
  if (it == rings_.end()) {
    return Status::NotFound("ratio monitor: no samples for " + CodecName(codec) + " layer " +
                            std::to_string(layer));
  }
  return Summarize(it->second);
}

}  // namespace kvtier::codecs
