#include "server/jobs/event_fanout.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace ampd::server::jobs {
namespace {

class Counter : public EventListener {
 public:
  void OnJobEvents() override {
    ++events;
    thread = std::this_thread::get_id();
  }
  void OnHeartbeat() override { ++heartbeats; }
  std::atomic<int> events{0}, heartbeats{0};
  std::thread::id thread;
};

bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(EventFanoutTest, ListenersAreToldOnTheNotifierThreadNotTheCaller) {
  EventFanout fanout;
  auto a = std::make_shared<Counter>(), b = std::make_shared<Counter>();
  auto other = std::make_shared<Counter>();
  fanout.Listen("j1", a);
  fanout.Listen("j1", b);
  fanout.Listen("j2", other);
  fanout.Notify("j1");
  ASSERT_TRUE(WaitFor([&] { return a->events >= 1 && b->events >= 1; }));
  EXPECT_NE(a->thread, std::this_thread::get_id());
  EXPECT_EQ(other->events, 0);
}

TEST(EventFanoutTest, NotifyNeverWaitsForAListener) {
  // The listener blocks until released. If Notify waited for listeners, the
  // loop below would never finish (the test times out instead of passing).
  class Blocking : public EventListener {
   public:
    void OnJobEvents() override {
      ++events;
      inside = true;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      inside = false;
    }
    void OnHeartbeat() override {}
    std::atomic<int> events{0};
    std::atomic<bool> inside{false}, release{false};
  };
  EventFanout fanout;
  auto l = std::make_shared<Blocking>();
  fanout.Listen("j", l);
  fanout.Notify("j");
  ASSERT_TRUE(WaitFor([&] { return l->inside.load(); }));
  for (int i = 0; i < 1000; ++i) fanout.Notify("j");
  EXPECT_TRUE(l->inside);  // still in its first wake-up: the marks coalesced
  EXPECT_EQ(l->events, 1);
  l->release = true;
  fanout.Stop();
  EXPECT_EQ(l->events, 2);  // one more wake-up covers all 1000 marks
}

TEST(EventFanoutTest, EveryNotifyIsFollowedByAWakeUp) {
  EventFanout fanout;
  auto l = std::make_shared<Counter>();
  fanout.Listen("j", l);
  for (int i = 1; i <= 5; ++i) {
    const int before = l->events;
    fanout.Notify("j");
    ASSERT_TRUE(WaitFor([&] { return l->events > before; })) << i;
  }
}

TEST(EventFanoutTest, ExpiredListenersAreDroppedAndForgetHandsTheRestBack) {
  EventFanout fanout;
  auto keep = std::make_shared<Counter>();
  {
    auto gone = std::make_shared<Counter>();
    fanout.Listen("j", gone);
  }
  fanout.Listen("j", keep);  // drops the expired one
  EXPECT_EQ(fanout.listener_count("j"), 1u);
  std::vector<std::weak_ptr<EventListener>> last = fanout.Forget("j");
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].lock().get(), keep.get());
  EXPECT_EQ(fanout.listener_count("j"), 0u);
  fanout.Notify("j");
  fanout.Stop();
  EXPECT_EQ(keep->events, 0);  // forgotten: nobody is told
}

TEST(EventFanoutTest, HeartbeatsGoToTheNamedJobsOnTheCallingThread) {
  EventFanout fanout;
  auto queued = std::make_shared<Counter>(), running = std::make_shared<Counter>();
  fanout.Listen("q", queued);
  fanout.Listen("r", running);
  fanout.Heartbeat({"q", "missing"});
  EXPECT_EQ(queued->heartbeats, 1);
  EXPECT_EQ(running->heartbeats, 0);
}

TEST(EventFanoutTest, StopDeliversWhatIsPending) {
  auto l = std::make_shared<Counter>();
  {
    EventFanout fanout;
    fanout.Listen("j", l);
    fanout.Notify("j");
    fanout.Stop();
    fanout.Stop();  // idempotent
  }
  EXPECT_EQ(l->events, 1);
}

}  // namespace
}  // namespace ampd::server::jobs
