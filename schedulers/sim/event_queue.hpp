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
  event_fn(F&& f) { // NOLINT: implicit, as std::function
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
      ops_->move(buf_, o.buf_); // leaves nothing in `o` to destroy
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
    void (*move)(void* to, void* from); ///< move-constructs at `to`, destroys `from`
    void (*destroy)(void*);
  };
  template <class D>
  static constexpr ops inplace_ops{[](void* p) { (*static_cast<D*>(p))(); },
                                   [](void* to, void* from) {
                                     ::new (to) D(std::move(*static_cast<D*>(from)));
                                     static_cast<D*>(from)->~D();
                                   },
                                   [](void* p) { static_cast<D*>(p)->~D(); }};
  template <class D>
  static constexpr ops heap_ops{[](void* p) { (**static_cast<D**>(p))(); },
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
/// operation per event. A bucket is a FIFO list threaded through a slab of
/// nodes that never move (blocks of a fixed size, reused through a free
/// list): at 10,000 simulated devices, buckets as vectors spent a fifth of the
/// time regrowing (malloc, and a move of every event each time).
class event_queue {
public:
  event_queue() = default;
  event_queue(const event_queue&) = delete;
  event_queue& operator=(const event_queue&) = delete;

  void post(double t, event_fn f) {
    std::uint32_t i = allocate();
    node& n = at(i);
    n.f = std::move(f);
    n.next = none;
    if (!(cached_valid_ && cached_->first == t)) {
      auto [it, fresh] = buckets_.try_emplace(t, bucket{i, i});
      cached_ = it, cached_valid_ = true;
      if (fresh) {
        ++size_;
        return;
      }
    }
    at(cached_->second.tail).next = i;
    cached_->second.tail = i;
    ++size_;
  }
  bool empty() const { return size_ == 0; }
  double next_time() const { return buckets_.begin()->first; }
  /// Runs the earliest event (after removing it, so it may post more, at the same time too).
  void run_next() {
    auto first = buckets_.begin();
    std::uint32_t i = first->second.head;
    node& n = at(i);
    event_fn f = std::move(n.f);
    if (n.next == none) {
      if (cached_valid_ && cached_ == first)
        cached_valid_ = false;
      buckets_.erase(first);
    } else {
      first->second.head = n.next;
      // The next event was posted long ago (a compute's end, a message): its
      // node is cold. Fetch it while this event runs (at 10,000 simulated
      // devices this load was a tenth of the time).
      const char* next = reinterpret_cast<const char*>(&at(n.next));
      __builtin_prefetch(next);
      __builtin_prefetch(next + 64);
    }
    free_.push_back(i);
    --size_;
    ++ran_;
    f();
  }
  /// Events run so far.
  std::uint64_t ran() const { return ran_; }
  std::size_t size() const { return size_; }

private:
  static constexpr std::uint32_t none = 0xffffffffu;
  static constexpr std::uint32_t block_bits = 12; ///< 4,096 nodes a block
  struct node {
    event_fn f;
    std::uint32_t next = none;
  };
  struct bucket {
    std::uint32_t head, tail;
  };
  node& at(std::uint32_t i) { return blocks_[i >> block_bits][i & ((1u << block_bits) - 1)]; }
  std::uint32_t allocate() {
    if (!free_.empty()) {
      std::uint32_t i = free_.back();
      free_.pop_back();
      return i;
    }
    if ((used_ >> block_bits) == blocks_.size())
      blocks_.push_back(std::make_unique<node[]>(std::size_t{1} << block_bits));
    return used_++;
  }

  std::map<double, bucket> buckets_;
  std::map<double, bucket>::iterator cached_; ///< the bucket posted to last (times repeat in runs)
  bool cached_valid_ = false;
  std::vector<std::unique_ptr<node[]>> blocks_;
  std::vector<std::uint32_t> free_; ///< nodes run and ready for reuse (most recent first: warm in cache)
  std::uint32_t used_ = 0;
  std::size_t size_ = 0;
  std::uint64_t ran_ = 0;
};

} // namespace troupe::sched
