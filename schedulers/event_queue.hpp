// The discrete-event drivers' queue: timed deliveries in time order, ties in
// the order they were posted (so a simulation is deterministic).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace troupe::sched {

/// A move-only `void()` callable kept in place when it fits in 64 bytes (a
/// message's metadata does), on the heap otherwise: at 10,000 simulated
/// devices std::function's allocation per event was a fifth of the time.
class event_fn {
public:
  event_fn() = default;
  template <class F, class D = std::decay_t<F>, class = std::enable_if_t<!std::is_same_v<D, event_fn>>>
  event_fn(F&& f) {  // NOLINT: implicit, as std::function
    if constexpr (sizeof(D) <= capacity && alignof(D) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<D>) {
      ::new (static_cast<void*>(buf_)) D(std::forward<F>(f));
      ops_ = &inplace_ops<D>;
    } else {
      ::new (static_cast<void*>(buf_)) D*(new D(std::forward<F>(f)));
      ops_ = &heap_ops<D>;
    }
  }
  event_fn(event_fn&& o) noexcept : ops_(o.ops_) {
    if (ops_)
      ops_->move(buf_, o.buf_);  // leaves nothing in `o` to destroy
    o.ops_ = nullptr;
  }
  event_fn& operator=(event_fn&& o) noexcept {
    if (this != &o) {
      reset();
      ops_ = o.ops_;
      if (ops_)
        ops_->move(buf_, o.buf_);
      o.ops_ = nullptr;
    }
    return *this;
  }
  event_fn(const event_fn&) = delete;
  event_fn& operator=(const event_fn&) = delete;
  ~event_fn() { reset(); }
  void operator()() { ops_->call(buf_); }

private:
  static constexpr std::size_t capacity = 64;
  struct ops {
    void (*call)(void*);
    void (*move)(void* to, void* from);  ///< move-constructs at `to`, destroys `from`
    void (*destroy)(void*);
  };
  template <class D>
  static constexpr ops inplace_ops{
    [](void* p) { (*static_cast<D*>(p))(); },
    [](void* to, void* from) {
      ::new (to) D(std::move(*static_cast<D*>(from)));
      static_cast<D*>(from)->~D();
    },
    [](void* p) { static_cast<D*>(p)->~D(); }};
  template <class D>
  static constexpr ops heap_ops{
    [](void* p) { (**static_cast<D**>(p))(); },
    [](void* to, void* from) { ::new (to) D*(*static_cast<D**>(from)); },
    [](void* p) { delete *static_cast<D**>(p); }};
  void reset() {
    if (ops_)
      ops_->destroy(buf_);
    ops_ = nullptr;
  }
  alignas(std::max_align_t) unsigned char buf_[capacity];
  const ops* ops_ = nullptr;
};

/// Timed deliveries in time order; ties keep the order they were posted in.
/// Events are kept in buckets by exact time: replicas that run in step post
/// thousands of events for one instant, so a bucket's append replaces a heap
/// operation per event (at 10,000 simulated devices, a binary heap of
/// std::function spent its time in cache misses).
class event_queue {
public:
  void post(double t, event_fn f) {
    buckets_[t].push_back(std::move(f));
    ++size_;
  }
  bool empty() const { return size_ == 0; }
  double next_time() const { return buckets_.begin()->first; }
  /// Runs the earliest event (after removing it, so it may post more, at the same time too).
  void run_next() {
    auto first = buckets_.begin();
    event_fn f = std::move(first->second[next_]);
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
  std::map<double, std::vector<event_fn>> buckets_;
  std::size_t next_ = 0;  ///< the next event's index in the earliest bucket
  std::size_t size_ = 0;
  std::uint64_t ran_ = 0;
};

} // namespace troupe::sched
