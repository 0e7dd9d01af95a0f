// Checks the bounded thread pool: every submitted task runs exactly once, TrySubmit reports Busy
// when the queue is full (back-pressure, not growth), Submit blocks until space frees up, the
// destructor drains queued work, and invalid options are rejected with a clear error.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace kvtier {
namespace {

TEST(ThreadPoolTest, RunsEveryTask) {
  auto pool = ThreadPool::Create({.threads = 2, .queue_tasks_max = 8});
  ASSERT_TRUE(pool.ok());
  std::atomic<int> count{0};
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE((*pool)->Submit([&] { count.fetch_add(1); }).ok());
  }
  (*pool)->WaitIdle();
  EXPECT_EQ(count.load(), 1000);
}

TEST(ThreadPoolTest, TrySubmitIsBusyWhenFull) {
  auto pool = ThreadPool::Create({.threads = 1, .queue_tasks_max = 2});
  ASSERT_TRUE(pool.ok());
  std::atomic<bool> release{false};
  std::atomic<bool> started{false};
  ASSERT_TRUE((*pool)
                  ->Submit([&] {
                    started = true;
                    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                  })
                  .ok());
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE((*pool)->TrySubmit([] {}).ok());
  EXPECT_TRUE((*pool)->TrySubmit([] {}).ok());
  Status s = (*pool)->TrySubmit([] {});
  EXPECT_TRUE(s.IsBusy()) << s.ToString();
  release = true;
  (*pool)->WaitIdle();
  EXPECT_EQ((*pool)->queued(), 0u);
}

TEST(ThreadPoolTest, DestructorDrainsQueue) {
  std::atomic<int> count{0};
  {
    auto pool = ThreadPool::Create({.threads = 1, .queue_tasks_max = 64});
    ASSERT_TRUE(pool.ok());
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE((*pool)->Submit([&] { count.fetch_add(1); }).ok());
    }
  }
  EXPECT_EQ(count.load(), 50);
}

TEST(ThreadPoolTest, RejectsBadOptions) {
  EXPECT_TRUE(ThreadPool::Create({.threads = 0}).status().IsInvalidArgument());
  EXPECT_TRUE(
      ThreadPool::Create({.threads = 1, .queue_tasks_max = 0}).status().IsInvalidArgument());
  EXPECT_TRUE(ThreadPool::Create({.threads = 100000}).status().IsInvalidArgument());
}

}  // namespace
}  // namespace kvtier
