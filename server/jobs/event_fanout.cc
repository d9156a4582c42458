#include "server/jobs/event_fanout.h"

#include <algorithm>

namespace ampd::server::jobs {

EventFanout::EventFanout() : thread_([this] { Loop(); }) {}

EventFanout::~EventFanout() { Stop(); }

void EventFanout::Listen(const std::string& job, std::weak_ptr<EventListener> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& ls = listeners_[job];
  ls.erase(std::remove_if(ls.begin(), ls.end(), [](const auto& w) { return w.expired(); }),
           ls.end());
  ls.push_back(std::move(listener));
}

std::vector<std::weak_ptr<EventListener>> EventFanout::Forget(const std::string& job) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = listeners_.find(job);
  if (it == listeners_.end()) return {};
  std::vector<std::weak_ptr<EventListener>> out = std::move(it->second);
  listeners_.erase(it);
  pending_.erase(job);
  return out;
}

void EventFanout::Notify(const std::string& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.insert(job);
  }
  cv_.notify_one();
}

std::vector<std::weak_ptr<EventListener>> EventFanout::ListenersOf(
    const std::set<std::string>& jobs) const {
  std::vector<std::weak_ptr<EventListener>> out;
  for (const std::string& job : jobs) {
    auto it = listeners_.find(job);
    if (it != listeners_.end()) out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

void EventFanout::Heartbeat(const std::vector<std::string>& jobs) {
  std::vector<std::weak_ptr<EventListener>> listeners;
  {
    std::lock_guard<std::mutex> lock(mu_);
    listeners = ListenersOf(std::set<std::string>(jobs.begin(), jobs.end()));
  }
  for (auto& w : listeners) {
    if (auto l = w.lock()) l->OnHeartbeat();
  }
}

void EventFanout::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
    if (pending_.empty() && stop_) return;
    std::set<std::string> jobs;
    jobs.swap(pending_);
    std::vector<std::weak_ptr<EventListener>> listeners = ListenersOf(jobs);
    lock.unlock();
    for (auto& w : listeners) {
      if (auto l = w.lock()) l->OnJobEvents();
    }
    lock.lock();
  }
}

void EventFanout::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;  // after delivering what is pending
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

size_t EventFanout::listener_count(const std::string& job) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = listeners_.find(job);
  if (it == listeners_.end()) return 0;
  return std::count_if(it->second.begin(), it->second.end(),
                       [](const auto& w) { return !w.expired(); });
}

}  // namespace ampd::server::jobs
