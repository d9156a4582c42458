#include "server/jobs/ended_job_cache.h"

#include "gtest/gtest.h"

namespace ampd::server::jobs {
namespace {

std::shared_ptr<const StoredJob> Job(const std::string& id) {
  auto j = std::make_shared<StoredJob>();
  j->job.set_id(id);
  j->event_count = 3;
  return j;
}

std::shared_ptr<const EndedJobCache::Page> PageOf(size_t events, size_t bytes_each) {
  auto p = std::make_shared<EndedJobCache::Page>();
  for (size_t i = 0; i < events; ++i) p->emplace_back(std::string(bytes_each, 'x'));
  return p;
}

TEST(EndedJobCacheTest, KeepsWhatWasPutAndForgetsAJobWhole) {
  EndedJobCache cache(1 << 20);
  cache.PutJob(Job("a"));
  cache.PutPage("a", 0, PageOf(4, 10));
  cache.PutPage("a", 1, PageOf(4, 10));
  cache.PutJob(Job("b"));
  ASSERT_NE(cache.Job("a"), nullptr);
  EXPECT_EQ(cache.Job("a")->event_count, 3);
  ASSERT_NE(cache.GetPage("a", 1), nullptr);
  EXPECT_EQ(cache.GetPage("a", 1)->size(), 4u);
  EXPECT_EQ(cache.GetPage("a", 2), nullptr);
  EXPECT_EQ(cache.Job("c"), nullptr);
  cache.Forget("a");
  EXPECT_EQ(cache.Job("a"), nullptr);
  EXPECT_EQ(cache.GetPage("a", 0), nullptr);
  EXPECT_EQ(cache.GetPage("a", 1), nullptr);
  EXPECT_NE(cache.Job("b"), nullptr);  // another job's entries stay
  EXPECT_EQ(cache.entries(), 1u);
}

TEST(EndedJobCacheTest, StaysWithinItsBudgetDroppingTheLeastRecentlyUsed) {
  // Pages of about 10 KB in a 50 KB cache.
  EndedJobCache cache(50 << 10);
  for (int i = 0; i < 4; ++i) cache.PutPage("j", i, PageOf(10, 1000));
  ASSERT_NE(cache.GetPage("j", 0), nullptr);  // now the most recently used
  for (int i = 4; i < 100; ++i) {
    cache.PutPage("j", i, PageOf(10, 1000));
    ASSERT_LE(cache.bytes(), 50u << 10);
    if (i % 2 == 0) {
      ASSERT_NE(cache.GetPage("j", 0), nullptr) << i;  // kept by its use
    }
  }
  EXPECT_EQ(cache.GetPage("j", 1), nullptr);
  EXPECT_NE(cache.GetPage("j", 99), nullptr);
  EXPECT_GE(cache.entries(), 3u);
  EXPECT_LE(cache.entries(), 5u);
  // Something bigger than the whole budget is not kept (and evicts nothing).
  const size_t before = cache.entries();
  cache.PutPage("big", 0, PageOf(100, 1000));
  EXPECT_EQ(cache.GetPage("big", 0), nullptr);
  EXPECT_EQ(cache.entries(), before);
}

}  // namespace
}  // namespace ampd::server::jobs
