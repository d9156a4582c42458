#ifndef AMPD_SERVER_JOBS_EVENT_FANOUT_H_
#define AMPD_SERVER_JOBS_EVENT_FANOUT_H_

// Wakes the streams that watch a job. Training only marks the job (Notify
// returns at once, whatever the number of subscribers); a notifier thread of
// its own then tells each listener, so a step never pays for its subscribers.
// Marks coalesce: a listener is told at least once after every Notify, and
// reads what is new from the job's history itself.

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace ampd::server::jobs {

// Told when a job it watches has new events (or a heartbeat is due). Called
// with no lock of the job manager or the fan-out held, so it may read from
// the manager; it must not block.
class EventListener {
 public:
  virtual ~EventListener() = default;
  virtual void OnJobEvents() = 0;
  virtual void OnHeartbeat() = 0;
};

class EventFanout {
 public:
  EventFanout();  // starts the notifier thread
  ~EventFanout();
  EventFanout(const EventFanout&) = delete;
  EventFanout& operator=(const EventFanout&) = delete;

  // Adds a listener of `job` (and drops its expired ones).
  void Listen(const std::string& job, std::weak_ptr<EventListener> listener);
  // The job is gone: its listeners, no longer kept, for a last wake-up.
  std::vector<std::weak_ptr<EventListener>> Forget(const std::string& job);
  // Marks `job`; its listeners are told on the notifier thread.
  void Notify(const std::string& job);
  // OnHeartbeat for the listeners of `jobs`, on the calling thread.
  void Heartbeat(const std::vector<std::string>& jobs);
  // Delivers what is pending, then stops the notifier. Idempotent.
  void Stop();
  size_t listener_count(const std::string& job) const;

 private:
  void Loop();
  std::vector<std::weak_ptr<EventListener>> ListenersOf(const std::set<std::string>& jobs) const;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<std::weak_ptr<EventListener>>> listeners_;
  std::set<std::string> pending_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ampd::server::jobs

#endif  // AMPD_SERVER_JOBS_EVENT_FANOUT_H_
