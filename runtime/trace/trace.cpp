// The trace recorder: per-thread single-writer ring buffers and their readers.
#include "runtime/trace/trace.hpp"

#include <time.h>

#include <bit>

namespace troupe {

namespace {
const auto trace_epoch = std::chrono::steady_clock::now();
}

std::int64_t trace_now() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - trace_epoch).count();
}

std::int64_t thread_cpu_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

std::int64_t trace_epoch_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(trace_epoch.time_since_epoch()).count();
}

std::string_view to_string(span_kind k) noexcept {
  switch (k) {
  case span_kind::forward:
    return "forward";
  case span_kind::backward_input:
    return "backward_input";
  case span_kind::backward_weight:
    return "backward_weight";
  case span_kind::backward:
    return "backward";
  case span_kind::send:
    return "send";
  case span_kind::receive:
    return "receive";
  case span_kind::optimizer:
    return "optimizer";
  case span_kind::idle:
    return "idle";
  case span_kind::eval:
    return "eval";
  case span_kind::sync:
    return "sync";
  case span_kind::forward_backward:
    return "forward_backward";
  case span_kind::other:
    return "other";
  case span_kind::attention:
    return "attention";
  }
  return "other";
}

/// A single-writer ring: the owning thread writes slot `head % size` and then
/// publishes `head + 1`; readers copy and re-check `head` to drop overwritten slots.
struct trace_recorder::ring {
  explicit ring(std::size_t capacity, std::uint64_t gen) : slots(capacity), mask(capacity - 1), generation(gen) {}
  std::vector<span> slots;
  std::size_t mask;
  std::atomic<std::uint64_t> head{0};
  std::uint64_t generation;
};

trace_recorder& trace_recorder::global() {
  static auto* r = new trace_recorder; // never destroyed: worker threads may record during exit
  return *r;
}

void trace_recorder::enable(std::size_t spans_per_thread) {
  std::lock_guard guard{mtx_};
  capacity_ = std::bit_ceil(spans_per_thread < 2 ? std::size_t{2} : spans_per_thread);
  enabled_.store(true, std::memory_order_relaxed);
}

std::uint16_t trace_recorder::register_actor(std::string name, std::string type, int node, std::string role,
                                             int position) {
  std::lock_guard guard{mtx_};
  auto id = static_cast<std::uint16_t>(actors_.size());
  actors_.push_back({id, std::move(name), std::move(type), node, std::move(role), position});
  return id;
}

std::optional<std::uint16_t> trace_recorder::actor_id(std::string_view name) const {
  std::lock_guard guard{mtx_};
  for (const auto& a : actors_)
    if (a.name == name)
      return a.id;
  return std::nullopt;
}

std::vector<actor_info> trace_recorder::actors() const {
  std::lock_guard guard{mtx_};
  return actors_;
}

trace_recorder::ring& trace_recorder::local() {
  thread_local std::shared_ptr<ring> mine;
  auto gen = generation_.load(std::memory_order_acquire);
  if (!mine || mine->generation != gen) {
    std::lock_guard guard{mtx_};
    mine = std::make_shared<ring>(capacity_, gen);
    rings_.push_back(mine);
  }
  return *mine;
}

void trace_recorder::record(const span& s) noexcept {
  if (!enabled())
    return;
  try {
    auto& r = local();
    auto h = r.head.load(std::memory_order_relaxed);
    r.slots[h & r.mask] = s;
    r.head.store(h + 1, std::memory_order_release);
  } catch (...) {
    // Out of memory creating this thread's buffer: the span is lost, the run goes on.
  }
}

void trace_recorder::count(std::string name, double value, std::int32_t step) {
  if (!enabled())
    return;
  std::lock_guard guard{mtx_};
  counters_.push_back({trace_now(), std::move(name), value, step});
}

void trace_recorder::collect(cursor& c, std::vector<span>& out, std::vector<counter_sample>* counters) const {
  std::vector<std::shared_ptr<ring>> rings;
  {
    std::lock_guard guard{mtx_};
    rings = rings_;
    if (counters) {
      for (auto i = c.counters; i < counters_.size(); ++i)
        counters->push_back(counters_[i]);
      c.counters = counters_.size();
    }
  }
  c.positions.resize(rings.size(), 0);
  for (std::size_t i = 0; i < rings.size(); ++i) {
    auto& r = *rings[i];
    auto size = r.slots.size();
    auto head = r.head.load(std::memory_order_acquire);
    auto from = std::max(c.positions[i], head > size ? head - size : 0);
    c.missed += from - c.positions[i];
    auto first = out.size();
    for (auto p = from; p < head; ++p)
      out.push_back(r.slots[p & r.mask]);
    // Slots the writer lapped while we copied are torn: drop them.
    auto after = r.head.load(std::memory_order_acquire);
    auto safe_from = after > size ? after - size : 0;
    if (safe_from > from) {
      auto torn = std::min<std::uint64_t>(safe_from - from, out.size() - first);
      c.missed += torn;
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(first),
                out.begin() + static_cast<std::ptrdiff_t>(first + torn));
    }
    c.positions[i] = head;
  }
}

void trace_recorder::reset() {
  std::lock_guard guard{mtx_};
  generation_.fetch_add(1, std::memory_order_acq_rel);
  rings_.clear();
  actors_.clear();
  for (auto& q : queued_)
    q.store(0, std::memory_order_relaxed);
  counters_.clear();
}

} // namespace troupe
