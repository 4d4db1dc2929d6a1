// The discrete-event drivers' queue: timed deliveries in time order, ties in
// the order they were posted (so a simulation is deterministic).
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

namespace troupe::sched {

/// Timed deliveries in time order; ties keep the order they were posted in.
class event_queue {
public:
  void post(double t, std::function<void()> f) { q_.push({t, seq_++, std::move(f)}); }
  bool empty() const { return q_.empty(); }
  double next_time() const { return q_.top().time; }
  /// Runs the earliest event (after removing it, so it may post more).
  void run_next() {
    auto f = std::move(const_cast<event&>(q_.top()).run);
    q_.pop();
    ++ran_;
    f();
  }
  /// Events run so far.
  std::uint64_t ran() const { return ran_; }
  std::size_t size() const { return q_.size(); }

private:
  struct event {
    double time;
    std::uint64_t seq;
    std::function<void()> run;
    bool operator>(const event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  std::priority_queue<event, std::vector<event>, std::greater<>> q_;
  std::uint64_t seq_ = 0;
  std::uint64_t ran_ = 0;
};

} // namespace troupe::sched
