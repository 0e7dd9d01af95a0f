// Checks the bounded thread pool: every submitted task runs exactly once, TrySubmit reports Busy
// when the queue is full (back-pressure, not growth), Submit blocks until space frees up, the
// destructor drains queued work, invalid options are rejected with a clear error, and a pool
// given a nice increment runs its tasks at that lower priority (read back from the system on the
// worker) while other threads keep theirs, and one asked for idle scheduling runs them under
// SCHED_IDLE (sched_getscheduler on the worker) with its nice value kept.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/thread_priority.h"

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

TEST(ThreadPoolTest, NiceIncrementLowersOnlyThePoolsWorkers) {
  const int base = ThisThreadNice();
  auto background = ThreadPool::Create({.threads = 2, .name = "bg", .nice_increment = 5});
  auto normal = ThreadPool::Create({.threads = 1, .name = "fg"});
  ASSERT_TRUE(background.ok() && normal.ok());
  std::atomic<int> bg_nice{-100};
  std::atomic<int> fg_nice{-100};
  ASSERT_TRUE((*background)->Submit([&] { bg_nice = ThisThreadNice(); }).ok());
  ASSERT_TRUE((*normal)->Submit([&] { fg_nice = ThisThreadNice(); }).ok());
  (*background)->WaitIdle();
  (*normal)->WaitIdle();
  EXPECT_EQ(bg_nice.load(), std::min(base + 5, kNiceMax));
  EXPECT_EQ(fg_nice.load(), base);
  EXPECT_EQ(ThisThreadNice(), base);  // The creating thread is left as it was.
}

TEST(ThreadPoolTest, IdleSchedulingMovesOnlyThePoolsWorkers) {
  const int base = ThisThreadNice();
  auto background = ThreadPool::Create(
      {.threads = 2, .name = "idle", .nice_increment = 3, .idle_scheduling = true});
  auto normal = ThreadPool::Create({.threads = 1, .name = "fg"});
  ASSERT_TRUE(background.ok() && normal.ok());
  std::atomic<int> bg_idle{-1}, fg_idle{-1}, bg_nice{-100};
  ASSERT_TRUE((*background)
                  ->Submit([&] {
                    bg_idle = ThisThreadIdleScheduled() ? 1 : 0;
                    bg_nice = ThisThreadNice();
                  })
                  .ok());
  ASSERT_TRUE((*normal)->Submit([&] { fg_idle = ThisThreadIdleScheduled() ? 1 : 0; }).ok());
  (*background)->WaitIdle();
  (*normal)->WaitIdle();
  EXPECT_EQ(bg_idle.load(), 1);
  EXPECT_EQ(bg_nice.load(), std::min(base + 3, kNiceMax));
  EXPECT_EQ(fg_idle.load(), 0);
  EXPECT_FALSE(ThisThreadIdleScheduled());  // The creating thread is left as it was.
}

TEST(ThreadPoolTest, NiceIncrementOutOfRangeIsRefused) {
  for (const int bad : {-1, kNiceMax + 1}) {
    auto pool = ThreadPool::Create({.threads = 1, .nice_increment = bad});
    ASSERT_FALSE(pool.ok());
    EXPECT_NE(pool.status().message().find("nice_increment"), std::string::npos);
  }
  EXPECT_FALSE(LowerThisThreadPriority(-3).ok());
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
