// Goal: show that RemoteStoreLanes runs calls side by side on lanes no other call is using: a get
// completes while a put is held in another lane; with a write lane, puts wait for it and never
// take the read lane (a get still completes while every put is held); at most `lanes` calls are
// ever inside the lanes at once (a call waits for a free lane, and gets one as soon as a call
// returns); what one lane put another gets (the lanes are one server); and Stats() adds the
// lanes' counters.
// Method: every lane is a view of one FakeRemoteStore (the server) that can hold its calls at a
// gate the test opens and counts the calls inside it; threads make the calls, and the test waits
// for the counts it expects (never for time, except to give a wrongly admitted call the chance
// to show up).
#include "tiers/remote_lanes.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "testing/fake_remote_store.h"
#include "tiers/ssd/ssd_test_util.h"

namespace kvtier {
namespace {

using ssd_test::Key;
using ssd_test::Layout;
using ssd_test::Payload;

constexpr size_t kPayload = 4096;

// The calls inside every lane, and the gate that holds them.
struct Server {
  FakeRemoteStore fake{{.layout_digest = Layout()}};
  Mutex mu;
  CondVar cv;
  bool gate_puts KV_GUARDED_BY(mu) = false;  // Puts wait until Open().
  int inside KV_GUARDED_BY(mu) = 0;          // Calls in a lane now.
  int inside_max KV_GUARDED_BY(mu) = 0;
  int puts_entered KV_GUARDED_BY(mu) = 0;

  void Open() {
    MutexLock lock(&mu);
    gate_puts = false;
    cv.SignalAll();
  }
  void WaitPutsEntered(int n) {
    MutexLock lock(&mu);
    while (puts_entered < n) cv.Wait(&mu);
  }
  int PutsEntered() {
    MutexLock lock(&mu);
    return puts_entered;
  }
  int InsideMax() {
    MutexLock lock(&mu);
    return inside_max;
  }
};

// One lane: a view of the server that counts the calls inside it.
class Lane final : public RemoteStore {
 public:
  explicit Lane(Server* server) : server_(server) {}
  Status Put(std::span<RemotePut> entries) override {
    Enter(/*put=*/true);
    const Status s = server_->fake.Put(entries);
    Leave();
    return s;
  }
  Status Get(std::span<RemoteGet> entries) override {
    Enter(/*put=*/false);
    const Status s = server_->fake.Get(entries);
    Leave();
    return s;
  }
  Status Exists(std::span<RemoteExists> entries) override { return server_->fake.Exists(entries); }
  Status Delete(std::span<RemoteDelete> entries) override { return server_->fake.Delete(entries); }
  RemoteStoreStats Stats() const override { return server_->fake.Stats(); }

 private:
  void Enter(bool put) {
    MutexLock lock(&server_->mu);
    server_->inside_max = std::max(server_->inside_max, ++server_->inside);
    if (put) {
      ++server_->puts_entered;
      server_->cv.SignalAll();
      while (server_->gate_puts) server_->cv.Wait(&server_->mu);
    }
  }
  void Leave() {
    MutexLock lock(&server_->mu);
    --server_->inside;
  }
  Server* const server_;
};

std::unique_ptr<RemoteStoreLanes> MakeLanes(Server* server, size_t reads, size_t writes = 0) {
  std::vector<std::unique_ptr<RemoteStore>> read_lanes, write_lanes;
  for (size_t i = 0; i < reads; ++i) read_lanes.push_back(std::make_unique<Lane>(server));
  for (size_t i = 0; i < writes; ++i) write_lanes.push_back(std::make_unique<Lane>(server));
  return std::make_unique<RemoteStoreLanes>(std::move(read_lanes), std::move(write_lanes));
}

Status PutOne(RemoteStore& store, uint64_t i, std::span<const std::byte> payload) {
  RemotePut p{.key = Key(i), .codec_id = 1, .raw_bytes = kPayload, .payload = payload};
  const Status call = store.Put(std::span(&p, 1));
  return call.ok() ? p.status : call;
}

Status GetOne(RemoteStore& store, uint64_t i) {
  std::vector<std::byte> buf(kPayload);
  RemoteGet g{.key = Key(i), .dst = buf};
  const Status call = store.Get(std::span(&g, 1));
  return call.ok() ? g.status : call;
}

TEST(RemoteStoreLanesTest, GetCompletesWhileAPutIsHeldInAnotherLane) {
  Server server;
  {
    MutexLock lock(&server.mu);
    server.gate_puts = true;
  }
  auto lanes = MakeLanes(&server, 2);
  const std::vector<std::byte> payload = Payload(1, kPayload);
  std::thread putter([&] { EXPECT_TRUE(PutOne(*lanes, 1, payload).ok()); });
  server.WaitPutsEntered(1);
  EXPECT_TRUE(GetOne(*lanes, 1).IsNotFound()) << "the get ran beside the held put";
  server.Open();
  putter.join();
  EXPECT_TRUE(GetOne(*lanes, 1).ok()) << "what one lane put, another gets";
}

TEST(RemoteStoreLanesTest, PutsWaitForTheirOwnLaneAndGetsGoOn) {
  Server server;
  {
    MutexLock lock(&server.mu);
    server.gate_puts = true;
  }
  auto lanes = MakeLanes(&server, /*reads=*/1, /*writes=*/1);
  EXPECT_EQ(lanes->lanes(), 2u);
  const std::vector<std::byte> payload = Payload(4, kPayload);
  std::vector<std::thread> putters;
  for (uint64_t i = 0; i < 3; ++i) {
    putters.emplace_back([&, i] { EXPECT_TRUE(PutOne(*lanes, 20 + i, payload).ok()); });
  }
  server.WaitPutsEntered(1);
  // A put admitted to the read lane would show up here.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(server.PutsEntered(), 1) << "puts take the write lane only";
  EXPECT_TRUE(GetOne(*lanes, 20).IsNotFound()) << "the read lane stayed free for gets";
  server.Open();
  for (std::thread& t : putters) t.join();
  EXPECT_EQ(server.PutsEntered(), 3);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(GetOne(*lanes, 20 + i).ok()) << i;
}

TEST(RemoteStoreLanesTest, AtMostOneCallPerLaneAndEveryCallGetsOne) {
  for (const size_t n : {size_t{1}, size_t{3}}) {
    Server server;
    {
      MutexLock lock(&server.mu);
      server.gate_puts = true;
    }
    auto lanes = MakeLanes(&server, n);
    EXPECT_EQ(lanes->lanes(), n);
    const std::vector<std::byte> payload = Payload(2, kPayload);
    constexpr uint64_t kCalls = 6;
    std::vector<std::thread> threads;
    for (uint64_t i = 0; i < kCalls; ++i) {
      threads.emplace_back([&, i] { EXPECT_TRUE(PutOne(*lanes, 10 + i, payload).ok()); });
    }
    server.WaitPutsEntered(static_cast<int>(n));
    // A call admitted past the lanes would show up here.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(server.PutsEntered(), static_cast<int>(n)) << n << " lanes";
    server.Open();
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(server.PutsEntered(), static_cast<int>(kCalls)) << "every waiting call got a lane";
    EXPECT_EQ(server.InsideMax(), static_cast<int>(n));
    for (uint64_t i = 0; i < kCalls; ++i) EXPECT_TRUE(GetOne(*lanes, 10 + i).ok()) << i;
  }
}

TEST(RemoteStoreLanesTest, StatsAddTheLanesCounters) {
  // Two servers, one per lane: each lane's counters are its own, and the sum is the lanes'.
  Server a, b;
  std::vector<std::unique_ptr<RemoteStore>> v;
  v.push_back(std::make_unique<Lane>(&a));
  v.push_back(std::make_unique<Lane>(&b));
  RemoteStoreLanes lanes(std::move(v));  // Read lanes only: puts take either.
  const std::vector<std::byte> payload = Payload(3, kPayload);
  ASSERT_TRUE(PutOne(a.fake, 1, payload).ok());
  ASSERT_TRUE(PutOne(b.fake, 2, payload).ok());
  ASSERT_TRUE(PutOne(b.fake, 3, payload).ok());
  EXPECT_TRUE(GetOne(a.fake, 1).ok());
  EXPECT_TRUE(GetOne(b.fake, 9).IsNotFound());
  const RemoteStoreStats s = lanes.Stats();
  EXPECT_EQ(s.puts, 3u);
  EXPECT_EQ(s.gets, 2u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.breaker_state, BreakerState::kClosed);
}

}  // namespace
}  // namespace kvtier
