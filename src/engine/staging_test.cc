// Goal: the staging pool serves its callers first come, first served: a caller that needs many
// buffers is not overtaken by a later caller that needs fewer, even while the later one's
// buffers are free, and once the first is served the next in line gets its turn; leases give
// every buffer back.
// Method: a pool of 4 buffers, leases held by the test's thread, two waiting threads; the pool's
// count of waiting callers tells when each waits (no sleeps, no timing).
#include "engine/staging.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace kvtier {
namespace {

void SpinUntil(const std::function<bool()>& done) {
  while (!done()) std::this_thread::yield();
}

TEST(StagingPoolTest, ALargeWaiterIsNotOvertakenByLaterSmallOnes) {
  Result<std::unique_ptr<StagingPool>> made = StagingPool::Create(4, 4096);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  StagingPool& pool = **made;
  std::optional<StagingLease> one(pool.Acquire(1));
  std::optional<StagingLease> three(pool.Acquire(3));
  std::mutex mu;
  std::vector<std::string> order;
  auto served = [&](const char* who) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(who);
  };
  std::atomic<bool> small_served{false};
  std::thread large([&] {
    StagingLease all = pool.Acquire(4);
    served("large");
    EXPECT_EQ(all.size(), 4u);
  });
  SpinUntil([&] { return pool.waiting() == 1; });
  three.reset();  // Three buffers free: the large caller still needs the fourth.
  std::thread small([&] {
    StagingLease a = pool.Acquire(1);
    small_served = true;
    served("small");
  });
  // The small caller's buffer is free, but it queues behind the large one.
  SpinUntil([&] { return small_served.load() || pool.waiting() == 2; });
  EXPECT_FALSE(small_served.load());
  EXPECT_EQ(pool.waiting(), 2u);
  one.reset();  // Now the large caller is served, then the small one.
  large.join();
  small.join();
  EXPECT_EQ(order, (std::vector<std::string>{"large", "small"}));
  EXPECT_EQ(pool.waiting(), 0u);
  EXPECT_EQ(pool.Acquire(4).size(), 4u);  // Every buffer came back.
}

}  // namespace
}  // namespace kvtier
