// RemoteTierAdapter (tiers/remote_tier_adapter.h): Tier batches translated to RemoteStore calls,
// with the tier's admission filter and write budget in front of Put, run on the adapter's I/O
// threads.
#include "tiers/remote_tier_adapter.h"

#include <utility>
#include <vector>

#include "core/assert.h"

namespace kvtier {

RemoteTierAdapter::RemoteTierAdapter(RemoteStore* store, const RemoteTierPolicy& policy)
    : store_(store), clock_(policy.clock) {
  KV_CHECK(store_ != nullptr);
  Result<std::unique_ptr<ThreadPool>> readers = ThreadPool::Create(
      {.threads = policy.io_threads, .queue_tasks_max = 1024, .name = "kvtier-remote"});
  Result<std::unique_ptr<ThreadPool>> writers =
      ThreadPool::Create({.threads = policy.io_threads,
                          .queue_tasks_max = 1024,
                          .name = "kvtier-rput",
                          .nice_increment = policy.write_nice,
                          .idle_scheduling = policy.write_idle});
  // Only a thread count or nice increment out of range fails: callers validate them.
  KV_CHECK(readers.ok() && writers.ok());
  {
    MutexLock lock(&io_[static_cast<size_t>(Lane::kRead)].mu);
    io_[static_cast<size_t>(Lane::kRead)].pool = std::move(*readers);
  }
  {
    MutexLock lock(&io_[static_cast<size_t>(Lane::kWrite)].mu);
    io_[static_cast<size_t>(Lane::kWrite)].pool = std::move(*writers);
  }
  if (policy.admission_requests > 1) {
    admission_ =
        std::make_unique<ssd::AdmissionFilter>(policy.admission_requests, policy.admission_slots);
  }
  if (policy.write_budget_bytes_per_s != 0) {
    KV_CHECK(policy.clock != nullptr);
    budget_ = std::make_unique<ssd::WriteBudget>(policy.write_budget_bytes_per_s,
                                                 policy.write_budget_burst_bytes,
                                                 policy.clock->NowMicros());
  }
}

RemoteTierAdapter::RemoteTierAdapter(std::unique_ptr<RemoteStore> store,
                                     const RemoteTierPolicy& policy)
    : RemoteTierAdapter(store.get(), policy) {
  owned_ = std::move(store);
}

RemoteTierAdapter::~RemoteTierAdapter() { Close().IgnoreError(); }

Status RemoteTierAdapter::Close() {
  closed_.store(true, std::memory_order_release);
  for (IoThreads& io : io_) {
    std::unique_ptr<ThreadPool> pool;
    {
      MutexLock lock(&io.mu);
      pool = std::move(io.pool);
    }
    // Runs every queued batch (each refused: closed_ is set) and joins the threads; a batch a
    // thread is running completes first.
    pool.reset();
  }
  return Status::Ok();
}

void RemoteTierAdapter::Submit(Lane lane, std::function<void()> run,
                               std::function<void()> refuse) {
  {
    IoThreads& io = io_[static_cast<size_t>(lane)];
    MutexLock lock(&io.mu);
    if (io.pool != nullptr) {
      // Waits while the queue is full. A pool still held here is not shutting down: this queues.
      const Status queued =
          io.pool->Submit([this, run = std::move(run), refuse = std::move(refuse)] {
            if (closed_.load(std::memory_order_acquire)) {
              refuse();
            } else {
              run();
            }
          });
      KV_CHECK(queued.ok());
      return;
    }
  }
  refuse();
}

TierCapabilities RemoteTierAdapter::capabilities() const {
  return TierCapabilities{
      .persistent = true, .shared = true, .local_contains = false, .write_back = true};
}

namespace {

Status Closed() { return Status::Unavailable("remote tier closed"); }

// An item of a batch refused because the adapter is closed.
void MarkClosed(TierRead& r) {
  r.status = Closed();
  r.corrupt = false;
  r.payload = {};
}
void MarkClosed(TierWrite& w) {
  w.status = Closed();
  w.skipped = false;
}

}  // namespace

template <typename Item>
void RemoteTierAdapter::SubmitBatch(Lane lane, std::span<Item> items, Callback done,
                                    void (RemoteTierAdapter::*run)(std::span<Item>,
                                                                   const Callback&)) {
  auto shared = std::make_shared<Callback>(std::move(done));
  Submit(lane, [this, items, shared, run] { (this->*run)(items, *shared); },
         [items, shared] {
           for (Item& item : items) MarkClosed(item);
           (*shared)(Closed());
         });
}

void RemoteTierAdapter::ReadBatch(std::span<TierRead> reads, Callback done) {
  SubmitBatch(Lane::kRead, reads, std::move(done), &RemoteTierAdapter::RunReads);
}

void RemoteTierAdapter::WriteBatch(std::span<TierWrite> writes, Callback done) {
  SubmitBatch(Lane::kWrite, writes, std::move(done), &RemoteTierAdapter::RunWrites);
}

void RemoteTierAdapter::RunReads(std::span<TierRead> reads, const Callback& done) {
  std::vector<RemoteGet> gets(reads.size());
  for (size_t i = 0; i < reads.size(); ++i) {
    gets[i].key = reads[i].key;
    gets[i].dst = reads[i].buffer;
  }
  const Status call = store_->Get(gets);
  for (size_t i = 0; i < reads.size(); ++i) {
    TierRead& r = reads[i];
    const RemoteGet& g = gets[i];
    const Status s = call.ok() ? g.status : call;
    r.corrupt = s.IsCorruption();
    // A value the store refused is a miss, as a record the SSD refused.
    r.status = r.corrupt ? Status::NotFound(s.message()) : s;
    r.payload = s.ok() ? std::span<const std::byte>(r.buffer.first(g.payload_bytes))
                       : std::span<const std::byte>();
    r.codec_id = g.codec_id;
    r.raw_bytes = g.raw_bytes;
  }
  done(call);
}

void RemoteTierAdapter::RunWrites(std::span<TierWrite> writes, const Callback& done) {
  std::vector<RemotePut> puts;
  std::vector<size_t> which;
  uint64_t not_admitted = 0, over_budget = 0;
  for (size_t i = 0; i < writes.size(); ++i) {
    TierWrite& w = writes[i];
    w.status = Status::Ok();
    w.skipped = false;
    if (admission_ != nullptr && !admission_->RecordAndAdmit(w.key)) {
      w.status = Status::Aborted("not admitted to the remote tier");
      w.skipped = true;
      ++not_admitted;
      continue;
    }
    if (budget_ != nullptr && !budget_->TryTake(w.payload.size(), clock_->NowMicros())) {
      w.status = Status::Busy("over the remote write budget");
      w.skipped = true;
      ++over_budget;
      continue;
    }
    // TTL in whole milliseconds, rounded up so that a block never outlives its expiry by less.
    puts.push_back(RemotePut{.key = w.key,
                             .codec_id = w.codec_id,
                             .raw_bytes = w.raw_bytes,
                             .payload = w.payload,
                             .ttl_ms = (w.ttl_us + 999) / 1000});
    which.push_back(i);
  }
  not_admitted_.fetch_add(not_admitted);
  over_budget_.fetch_add(over_budget);
  const Status call = puts.empty() ? Status::Ok() : store_->Put(puts);
  Status first = call;
  for (size_t p = 0; p < puts.size(); ++p) {
    const Status s = call.ok() ? puts[p].status : call;
    writes[which[p]].status = s;
    if (!s.ok() && first.ok()) first = s;
  }
  done(first);
}

Status RemoteTierAdapter::Contains(std::span<TierContains> items) {
  std::vector<RemoteExists> asks(items.size());
  for (size_t i = 0; i < items.size(); ++i) asks[i].key = items[i].key;
  const Status call = store_->Exists(asks);
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].status = call.ok() ? asks[i].status : call;
    items[i].present = items[i].status.ok() && asks[i].exists;
    // A miss is a request, as for the SSD tier's filter.
    if (items[i].status.ok() && !asks[i].exists && admission_ != nullptr) {
      admission_->Record(items[i].key);
    }
  }
  return call;
}

Status RemoteTierAdapter::Erase(std::span<const BlockKey> keys) {
  std::vector<RemoteDelete> deletes(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) deletes[i].key = keys[i];
  Status first = store_->Delete(deletes);
  for (const RemoteDelete& d : deletes) {
    if (first.ok() && !d.status.ok()) first = d.status;
  }
  return first;
}

TierStoreStats RemoteTierAdapter::Stats() {
  const RemoteStoreStats s = store_->Stats();
  const RemoteStore::Usage usage = store_->StoreUsage();
  return TierStoreStats{.blocks_known = false,
                        .capacity_bytes = usage.capacity_bytes,
                        .used_bytes = usage.used_bytes,
                        .dropped = usage.removed,
                        .reads = s.gets,
                        .read_hits = s.hits,
                        .read_misses = s.misses,
                        .corrupt = s.corrupt + s.mismatched + s.auth_failures,
                        .writes = s.puts,
                        .write_errors = s.errors + s.timeouts,
                        .not_admitted = not_admitted_.load(),
                        .over_budget = over_budget_.load()};
}

}  // namespace kvtier
