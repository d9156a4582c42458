#include "server/jobs/job_queue.h"

#include "engine/core/error_subject.h"
#include "gtest/gtest.h"

namespace ampd::server::jobs {
namespace {

TEST(JobQueueTest, HighestPriorityFirstThenSubmissionOrder) {
  JobQueue q({100, 100});
  q.Push("a", "alice", 0, 1);
  q.Push("b", "bob", 5, 2);
  q.Push("c", "alice", 0, 3);
  q.Push("d", "bob", 5, 4);
  EXPECT_EQ(q.Ids(), (std::vector<std::string>{"b", "d", "a", "c"}));
  EXPECT_EQ(q.Position("b"), 0);
  EXPECT_EQ(q.Position("c"), 3);
  EXPECT_EQ(q.Position("zz"), -1);
  EXPECT_EQ(*q.Pop(), "b");
  EXPECT_EQ(*q.Pop(), "d");
  EXPECT_EQ(q.Position("a"), 0);
  EXPECT_EQ(q.size(), 2u);
}

TEST(JobQueueTest, RemovedJobsLeaveTheOrderOfTheRest) {
  JobQueue q({100, 100});
  for (int i = 0; i < 4; ++i) q.Push(std::to_string(i), "u", 0, i);
  EXPECT_TRUE(q.Remove("1"));
  EXPECT_FALSE(q.Remove("1"));
  EXPECT_EQ(q.Ids(), (std::vector<std::string>{"0", "2", "3"}));
  q.Clear();
  EXPECT_TRUE(q.empty());
  EXPECT_FALSE(q.Pop().has_value());
}

TEST(JobQueueTest, ThePerPrincipalLimitComesFirstAndNamesItself) {
  JobQueue q({3, 2});
  EXPECT_TRUE(q.CheckAdmission("alice").ok());
  q.Push("a1", "alice", 0, 1);
  q.Push("a2", "alice", 0, 2);
  EXPECT_EQ(q.QueuedBy("alice"), 2);
  absl::Status s = q.CheckAdmission("alice");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "max_queued_jobs_per_principal: alice already have 2 queued jobs (the limit)");
  std::vector<engine::core::ErrorSubject> e = engine::core::GetErrorSubjects(s);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].subject, "max_queued_jobs_per_principal");
  // Someone else still fits, until the queue itself is full.
  EXPECT_TRUE(q.CheckAdmission("bob").ok());
  q.Push("b1", "bob", 0, 3);
  s = q.CheckAdmission("bob");
  EXPECT_EQ(s.message(), "max_queued_jobs: the queue already holds 3 jobs (the limit)");
  EXPECT_EQ(engine::core::GetErrorSubjects(s).at(0).subject, "max_queued_jobs");
  // A job leaving the queue frees its place.
  ASSERT_EQ(*q.Pop(), "a1");
  EXPECT_TRUE(q.CheckAdmission("alice").ok());
}

}  // namespace
}  // namespace ampd::server::jobs
