// The discrete-event drivers' queue: timed deliveries in time order, ties in
// the order they were posted (so a simulation is deterministic).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace troupe::sched {

/// Timed deliveries in time order; ties keep the order they were posted in.
/// Events are kept in buckets by exact time: replicas that run in step post
/// thousands of events for one instant, so a bucket's append replaces a heap
/// operation per event (at 10,000 simulated devices, a binary heap of
/// std::function spent its time in cache misses).
class event_queue {
public:
  void post(double t, std::function<void()> f) {
    buckets_[t].push_back(std::move(f));
    ++size_;
  }
  bool empty() const { return size_ == 0; }
  double next_time() const { return buckets_.begin()->first; }
  /// Runs the earliest event (after removing it, so it may post more, at the same time too).
  void run_next() {
    auto first = buckets_.begin();
    auto f = std::move(first->second[next_]);
    if (++next_ == first->second.size()) {
      buckets_.erase(first);
      next_ = 0;
    }
    --size_;
    ++ran_;
    f();
  }
  /// Events run so far.
  std::uint64_t ran() const { return ran_; }
  std::size_t size() const { return size_; }

private:
  std::map<double, std::vector<std::function<void()>>> buckets_;
  std::size_t next_ = 0;  ///< the next event's index in the earliest bucket
  std::size_t size_ = 0;
  std::uint64_t ran_ = 0;
};

} // namespace troupe::sched
