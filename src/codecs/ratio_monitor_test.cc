// Goal: the ratio monitor raises exactly one event when a (codec, layer) window's coefficient of
// variation crosses the threshold, re-arms when it falls back, keeps keys apart, bounds its
// memory, and is safe under concurrent recording. Method: feed constant ratios (CV 0), then
// alternating ratios with a known CV, then constant ones again, counting observer calls and
// Stats(); hammer Record from four threads and check the totals.
#include "codecs/ratio_monitor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

namespace kvtier::codecs {
namespace {

TEST(RatioMonitorTest, RaisesOnceWhenCvCrossesAndRearms) {
  std::vector<RatioEvent> events;
  Result<std::unique_ptr<RatioMonitor>> m =
      RatioMonitor::Create({.window_samples = 16,
                            .samples_min = 8,
                            .cv_max = 0.15,
                            .on_event = [&events](const RatioEvent& e) { events.push_back(e); }});
  ASSERT_TRUE(m.ok());
  RatioMonitor& mon = **m;
  for (int i = 0; i < 20; ++i) mon.Record(CodecId::kShuffleZstd, 3, 1100, 1000);
  EXPECT_TRUE(events.empty());
  Result<RatioWindowStats> w = mon.Window(CodecId::kShuffleZstd, 3);
  ASSERT_TRUE(w.ok());
  EXPECT_NEAR(w->ratio_mean, 1.1, 1e-12);
  EXPECT_NEAR(w->ratio_cv, 0, 1e-12);
  // Alternating 1.0 and 2.0 over a full window: mean 1.5, stddev 0.5, CV 1/3.
  for (int i = 0; i < 16; ++i) mon.Record(CodecId::kShuffleZstd, 3, i % 2 == 0 ? 1000 : 2000, 1000);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].codec, CodecId::kShuffleZstd);
  EXPECT_EQ(events[0].layer, 3u);
  w = mon.Window(CodecId::kShuffleZstd, 3);
  EXPECT_NEAR(w->ratio_cv, 1.0 / 3.0, 1e-12);
  EXPECT_EQ(mon.Stats().events_total, 1u);
  // Back to stable: re-armed, then a second excursion raises a second event.
  for (int i = 0; i < 16; ++i) mon.Record(CodecId::kShuffleZstd, 3, 1000, 1000);
  for (int i = 0; i < 16; ++i) mon.Record(CodecId::kShuffleZstd, 3, i % 2 == 0 ? 1000 : 3000, 1000);
  EXPECT_EQ(events.size(), 2u);
  EXPECT_EQ(mon.Stats().events_total, 2u);
  EXPECT_EQ(mon.Stats().samples_total, 68u);
}

TEST(RatioMonitorTest, KeysAreSeparateAndBounded) {
  Result<std::unique_ptr<RatioMonitor>> m =
      RatioMonitor::Create({.window_samples = 4, .samples_min = 2, .keys_max = 2});
  ASSERT_TRUE(m.ok());
  RatioMonitor& mon = **m;
  mon.Record(CodecId::kInt8, 0, 400, 100);
  mon.Record(CodecId::kInt8, 1, 200, 100);
  mon.Record(CodecId::kInt4, 0, 400, 100);  // Third key: dropped.
  mon.Record(CodecId::kInt8, 0, 400, 0);    // Zero encoded size: dropped.
  EXPECT_NEAR(mon.Window(CodecId::kInt8, 0)->ratio_mean, 4.0, 1e-12);
  EXPECT_NEAR(mon.Window(CodecId::kInt8, 1)->ratio_mean, 2.0, 1e-12);
  EXPECT_TRUE(mon.Window(CodecId::kInt4, 0).status().IsNotFound());
  const RatioMonitorStats s = mon.Stats();
  EXPECT_EQ(s.keys, 2u);
  EXPECT_EQ(s.samples_dropped, 2u);
  EXPECT_EQ(s.events_total, 0u);
}

TEST(RatioMonitorTest, OptionsAreValidated) {
  EXPECT_FALSE(RatioMonitor::Create({.window_samples = 1}).ok());
  EXPECT_FALSE(RatioMonitor::Create({.window_samples = 5000}).ok());
  EXPECT_FALSE(RatioMonitor::Create({.window_samples = 8, .samples_min = 9}).ok());
  EXPECT_FALSE(RatioMonitor::Create({.cv_max = 0}).ok());
  EXPECT_FALSE(RatioMonitor::Create({.keys_max = 0}).ok());
}

TEST(RatioMonitorTest, ConcurrentRecordingKeepsCounts) {
  std::atomic<int> events{0};
  Result<std::unique_ptr<RatioMonitor>> m = RatioMonitor::Create(
      {.window_samples = 32, .samples_min = 8, .on_event = [&events](const RatioEvent&) {
         events.fetch_add(1);
       }});
  ASSERT_TRUE(m.ok());
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&mon = **m, t] {
      for (int i = 0; i < 5000; ++i)
        mon.Record(CodecId::kInt4, t % 2, 1000 + static_cast<uint64_t>(i % 3) * 100, 250);
    });
  }
  for (auto& th : threads) th.join();
  const RatioMonitorStats s = (*m)->Stats();
  EXPECT_EQ(s.samples_total, 20000u);
  EXPECT_EQ(s.keys, 2u);
  EXPECT_EQ(s.events_total, static_cast<uint64_t>(events.load()));
}

}  // namespace
}  // namespace kvtier::codecs
