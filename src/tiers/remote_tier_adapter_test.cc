// Goal: show that RemoteTierAdapter never makes its caller wait for the store: ReadBatch and
// WriteBatch return while the store has not answered, and their callbacks run on the adapter's
// I/O threads; that a read never queues behind writes (reads and writes have threads of their
// own, and a mutex of their own: not even a write waiting for room in a full queue holds a read
// up) and that the writers run at the lower priority asked for (their nice value, read on the
// thread); and that shutdown loses no callback: a batch the store is answering completes as
// usual, every queued batch completes once with Unavailable without reaching the store, and a
// batch given after Close completes at once, also Unavailable.
// Method: FakeRemoteStore behind a store that holds every Get and Put at a gate the test opens,
// and counts the calls that reached it. The test issues batches while the gate is shut, checks
// that the calls returned and that no callback ran, then opens the gate; for shutdown, one I/O
// thread is held inside the store while more batches queue behind it and Close (or the
// destructor) runs on another thread. Each callback counts its runs and records its thread.
#include "tiers/remote_tier_adapter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/thread_priority.h"
#include "testing/fake_remote_store.h"
#include "tiers/ssd/ssd_test_util.h"

namespace kvtier {
namespace {

using ssd_test::Key;
using ssd_test::Layout;
using ssd_test::Payload;

constexpr size_t kPayload = 4096;
constexpr uint8_t kCodec = 1;
constexpr uint32_t kRaw = kPayload;

// FakeRemoteStore whose Get and Put (or only its Put, with gate_reads false) wait at a gate
// until Open() is called.
class GatedStore final : public RemoteStore {
 public:
  explicit GatedStore(bool gate_reads = true)
      : fake_({.layout_digest = Layout()}), gate_reads_(gate_reads) {}

  void Open() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    open_ = true;
    cv_.SignalAll();
  }
  // Waits until `n` Get or Put calls reached the store (and wait at the gate, if it is shut).
  void WaitEntered(int n) KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    while (entered_ < n) cv_.Wait(&mu_);
  }
  int entered() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return entered_;
  }
  FakeRemoteStore& fake() { return fake_; }

  Status Put(std::span<RemotePut> entries) override {
    Pass();
    return fake_.Put(entries);
  }
  Status Get(std::span<RemoteGet> entries) override {
    if (gate_reads_) Pass();
    return fake_.Get(entries);
  }
  Status Exists(std::span<RemoteExists> entries) override { return fake_.Exists(entries); }
  Status Delete(std::span<RemoteDelete> entries) override { return fake_.Delete(entries); }
  RemoteStoreStats Stats() const override { return fake_.Stats(); }

 private:
  void Pass() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    ++entered_;
    cv_.SignalAll();
    while (!open_) cv_.Wait(&mu_);
  }

  FakeRemoteStore fake_;
  const bool gate_reads_;
  Mutex mu_;
  CondVar cv_;
  bool open_ KV_GUARDED_BY(mu_) = false;
  int entered_ KV_GUARDED_BY(mu_) = 0;
};

// One batch's callback: how often it ran, with what, on which thread.
struct Completion {
  Mutex mu;
  CondVar cv;
  int runs KV_GUARDED_BY(mu) = 0;
  Status status KV_GUARDED_BY(mu);
  std::thread::id thread KV_GUARDED_BY(mu);
  int nice KV_GUARDED_BY(mu) = 0;  // The calling thread's nice value.

  Tier::Callback Callback() {
    return [this](Status s) {
      MutexLock lock(&mu);
      ++runs;
      status = std::move(s);
      thread = std::this_thread::get_id();
      nice = ThisThreadNice();
      cv.SignalAll();
    };
  }
  int Runs() {
    MutexLock lock(&mu);
    return runs;
  }
  // Waits for the first run; returns its status.
  Status Wait() {
    MutexLock lock(&mu);
    while (runs == 0) cv.Wait(&mu);
    return status;
  }
  std::thread::id Thread() {
    MutexLock lock(&mu);
    return thread;
  }
  int Nice() {
    MutexLock lock(&mu);
    return nice;
  }
};

// Writes block i of `writes` as a batch of its own, completed into done[i].
void WriteOneByOne(RemoteTierAdapter& tier, std::span<const std::byte> payload,
                   std::vector<TierWrite>& writes, std::vector<Completion>& done) {
  for (size_t i = 0; i < writes.size(); ++i) {
    writes[i] = TierWrite{.key = Key(i), .codec_id = kCodec, .raw_bytes = kRaw, .payload = payload};
    tier.WriteBatch(std::span(&writes[i], 1), done[i].Callback());
  }
}

TEST(RemoteTierAdapterAsyncTest, HeldStoreDoesNotHoldTheIssuer) {
  GatedStore store;
  RemoteTierAdapter tier(&store, RemoteTierPolicy{.io_threads = 2});
  const std::vector<std::byte> payload = Payload(1, kPayload);
  TierWrite w{.key = Key(1), .codec_id = kCodec, .raw_bytes = kRaw, .payload = payload};
  Completion wrote;
  tier.WriteBatch(std::span(&w, 1), wrote.Callback());
  std::vector<std::byte> buf(kPayload);
  TierRead r{.key = Key(1), .buffer = buf};
  Completion read;
  tier.ReadBatch(std::span(&r, 1), read.Callback());
  // Both calls returned while the store holds them: each I/O thread waits at the gate.
  store.WaitEntered(2);
  EXPECT_EQ(wrote.Runs(), 0);
  EXPECT_EQ(read.Runs(), 0);
  store.Open();
  EXPECT_TRUE(wrote.Wait().ok());
  EXPECT_TRUE(read.Wait().ok());
  EXPECT_EQ(wrote.Runs(), 1);
  EXPECT_EQ(read.Runs(), 1);
  EXPECT_NE(wrote.Thread(), std::this_thread::get_id()) << "called back on an I/O thread";
  EXPECT_NE(read.Thread(), std::this_thread::get_id());
  // The read ran concurrently with the write: a hit or a miss, never an error.
  EXPECT_TRUE(r.status.ok() || r.status.IsNotFound()) << r.status.ToString();
  EXPECT_TRUE(w.status.ok()) << w.status.ToString();
  EXPECT_TRUE(store.fake().Contains(Key(1)));
}

TEST(RemoteTierAdapterAsyncTest, ReadsDoNotQueueBehindHeldWrites) {
  GatedStore store(/*gate_reads=*/false);
  RemoteTierAdapter tier(&store, RemoteTierPolicy{.io_threads = 1, .write_nice = 3});
  const std::vector<std::byte> payload = Payload(5, kPayload);
  constexpr size_t kBatches = 3;
  std::vector<TierWrite> writes(kBatches);
  std::vector<Completion> wrote(kBatches);
  WriteOneByOne(tier, payload, writes, wrote);
  store.WaitEntered(1);  // The only writer is held in the store; two writes queue behind it.
  std::vector<std::byte> buf(kPayload);
  TierRead r{.key = Key(0), .buffer = buf};
  Completion read;
  tier.ReadBatch(std::span(&r, 1), read.Callback());
  EXPECT_TRUE(read.Wait().ok()) << "the read completed while every write is held";
  EXPECT_TRUE(r.status.IsNotFound()) << r.status.ToString();
  for (Completion& c : wrote) EXPECT_EQ(c.Runs(), 0);
  store.Open();
  const int base = ThisThreadNice();
  for (size_t i = 0; i < kBatches; ++i) {
    EXPECT_TRUE(wrote[i].Wait().ok()) << i;
    EXPECT_EQ(wrote[i].Nice(), std::min(base + 3, kNiceMax)) << "writers run at a lower priority";
  }
  EXPECT_EQ(read.Nice(), base) << "readers keep the process's priority";
}

TEST(RemoteTierAdapterAsyncTest, AReadGoesOnWhileAWriteWaitsForRoomInAFullQueue) {
  GatedStore store(/*gate_reads=*/false);
  RemoteTierAdapter tier(&store, RemoteTierPolicy{.io_threads = 1});
  const std::vector<std::byte> payload = Payload(6, kPayload);
  // One write held in the store, 1024 queued (the queue's size), and one more that waits in
  // WriteBatch for room.
  constexpr size_t kWrites = 1 + 1024 + 1;
  std::vector<TierWrite> writes(kWrites);
  std::vector<Completion> wrote(kWrites);
  std::atomic<size_t> issued{0};
  std::thread writer([&] {
    for (size_t i = 0; i < kWrites; ++i) {
      writes[i] = TierWrite{.key = Key(i), .codec_id = kCodec, .raw_bytes = kRaw,
                            .payload = payload};
      issued = i + 1;
      tier.WriteBatch(std::span(&writes[i], 1), wrote[i].Callback());
    }
  });
  store.WaitEntered(1);
  while (issued.load() < kWrites) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<std::byte> buf(kPayload);
  TierRead r{.key = Key(0), .buffer = buf};
  Completion read;
  tier.ReadBatch(std::span(&r, 1), read.Callback());
  EXPECT_TRUE(read.Wait().ok()) << "the read did not wait for the writers' queue";
  EXPECT_EQ(wrote[kWrites - 1].Runs(), 0);
  store.Open();
  writer.join();
  for (size_t i = 0; i < kWrites; ++i) EXPECT_TRUE(wrote[i].Wait().ok()) << i;
}

TEST(RemoteTierAdapterAsyncTest, CloseCompletesQueuedBatchesOnceWithoutTheStore) {
  GatedStore store;
  RemoteTierAdapter tier(&store, RemoteTierPolicy{.io_threads = 1});
  const std::vector<std::byte> payload = Payload(2, kPayload);
  constexpr size_t kBatches = 5;
  std::vector<TierWrite> writes(kBatches);
  std::vector<Completion> done(kBatches);
  WriteOneByOne(tier, payload, writes, done);
  store.WaitEntered(1);  // The first batch holds the only I/O thread; the others are queued.
  std::thread closer([&] { EXPECT_TRUE(tier.Close().ok()); });
  // Close waits for the batch in the store. Probe until a batch completes on this thread before
  // the call returns: then Close has begun, and every batch still queued will be refused.
  // The probes are writes, which queue behind the held one (a read has threads of its own).
  std::vector<std::unique_ptr<Completion>> probes;
  std::vector<std::unique_ptr<TierWrite>> probe_writes;
  for (;;) {
    probes.push_back(std::make_unique<Completion>());
    probe_writes.push_back(std::make_unique<TierWrite>(
        TierWrite{.key = Key(100), .codec_id = kCodec, .raw_bytes = kRaw, .payload = payload}));
    tier.WriteBatch(std::span(probe_writes.back().get(), 1), probes.back()->Callback());
    if (probes.back()->Runs() == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(probes.back()->Wait().IsUnavailable());
  EXPECT_EQ(probes.back()->Thread(), std::this_thread::get_id());
  store.Open();
  closer.join();

  EXPECT_TRUE(done[0].Wait().ok()) << "the batch in the store completes as usual";
  EXPECT_TRUE(writes[0].status.ok());
  for (size_t i = 1; i < kBatches; ++i) {
    EXPECT_TRUE(done[i].Wait().IsUnavailable()) << i;
    EXPECT_TRUE(writes[i].status.IsUnavailable()) << i;
    EXPECT_FALSE(writes[i].skipped);
  }
  for (size_t p = 0; p < probes.size(); ++p) {
    EXPECT_TRUE(probes[p]->Wait().IsUnavailable()) << p;
    EXPECT_TRUE(probe_writes[p]->status.IsUnavailable()) << p;
  }
  for (Completion& c : done) EXPECT_EQ(c.Runs(), 1);
  for (const auto& c : probes) EXPECT_EQ(c->Runs(), 1);
  EXPECT_EQ(store.entered(), 1) << "refused batches never reach the store";
  EXPECT_EQ(store.fake().value_count(), 1u);
}

TEST(RemoteTierAdapterAsyncTest, DestructorCompletesEveryQueuedBatchOnce) {
  GatedStore store;
  auto tier = std::make_unique<RemoteTierAdapter>(&store, RemoteTierPolicy{.io_threads = 1});
  const std::vector<std::byte> payload = Payload(3, kPayload);
  constexpr size_t kBatches = 8;
  std::vector<TierWrite> writes(kBatches);
  std::vector<Completion> done(kBatches);
  WriteOneByOne(*tier, payload, writes, done);
  store.WaitEntered(1);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    store.Open();
  });
  tier.reset();  // Waits for the batch in the store, then drains the queue.
  opener.join();
  size_t refused = 0;
  for (size_t i = 0; i < kBatches; ++i) {
    EXPECT_EQ(done[i].Runs(), 1) << i;
    const Status s = done[i].Wait();
    EXPECT_TRUE(s.ok() || s.IsUnavailable()) << s.ToString();
    if (s.IsUnavailable()) ++refused;
  }
  EXPECT_EQ(static_cast<size_t>(store.entered()) + refused, kBatches)
      << "each batch reached the store or was refused";
}

TEST(RemoteTierAdapterAsyncTest, ReadsAndWritesAfterCloseCompleteOnTheCaller) {
  GatedStore store;
  store.Open();
  RemoteTierAdapter tier(&store, RemoteTierPolicy{});
  ASSERT_TRUE(tier.Close().ok());
  const std::vector<std::byte> payload = Payload(4, kPayload);
  TierWrite w{.key = Key(4), .codec_id = kCodec, .raw_bytes = kRaw, .payload = payload};
  EXPECT_TRUE(tier.WriteBatchSync(std::span(&w, 1)).IsUnavailable());
  EXPECT_TRUE(w.status.IsUnavailable());
  std::vector<std::byte> buf(kPayload);
  TierRead r{.key = Key(4), .buffer = buf};
  EXPECT_TRUE(tier.ReadBatchSync(std::span(&r, 1)).IsUnavailable());
  EXPECT_TRUE(r.status.IsUnavailable());
  EXPECT_EQ(store.entered(), 0);
  // Contains and Erase stay synchronous calls of the store.
  TierContains c{.key = Key(4)};
  EXPECT_TRUE(tier.Contains(std::span(&c, 1)).ok());
  EXPECT_FALSE(c.present);
}

}  // namespace
}  // namespace kvtier
