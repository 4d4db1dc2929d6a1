// Span and counter recording for every actor: per-thread ring buffers written
// without locks, drained while the run goes on by the trace file's writer
// (trace_writer), the dashboard and a node's stream to its coordinator.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

/// What an actor was doing during a span.
enum class span_kind : std::uint8_t {
  forward,
  backward_input,
  backward_weight,
  backward,
  send,
  receive,
  optimizer,
  idle,
  eval,
  sync,      ///< a gradient bucket's all-reduce, from its arrival at the peer to its sum going back
  attention, ///< a core-attention shard run for a stage (an attention server's work, #15)
  /// An F&B action: one microbatch's forward fused with another's backward
  /// (dualpipev); the span's microbatch is the forward's.
  forward_backward,
  other ///< the last: readers check kinds against it
};

/// `forward`, `backward_input`, …
std::string_view to_string(span_kind k) noexcept;

/// One closed interval of an actor's time. 48 bytes, trivially copyable.
struct span {
  std::int64_t begin_ns = 0;
  std::int64_t end_ns = 0;
  std::uint64_t bytes = 0; ///< bytes sent or received, where that applies
  std::uint64_t flow = 0;  ///< nonzero links a send to its receive
  std::int32_t step = -1;
  std::int32_t microbatch = -1;
  std::uint16_t actor = 0; ///< id from trace_recorder::register_actor
  span_kind kind = span_kind::other;
  std::uint8_t flow_end = 0; ///< 1 when this span receives `flow`
  std::uint32_t mailbox = 0; ///< mailbox depth when the span began
};

/// A sampled value: loss, tokens/s, bubble fraction.
struct counter_sample {
  std::int64_t t_ns;
  std::string name;
  double value;
  std::int32_t step;
};

/// An actor known to the recorder.
struct actor_info {
  std::uint16_t id;
  std::string name;
  std::string type;
  int node;
  std::string role = {}; ///< what summaries make of it (stage_role, or empty), as its type declares
  int position = -1;     ///< a stage's pipeline position (its rank), whose replicas are its peers; -1: none
};

/// The trace role of a pipeline position: the bubble fraction and the action
/// orders of a trace summary are over the actors with this role.
inline constexpr std::string_view stage_role = "stage";

/// Nanoseconds on the trace clock (steady, since the recorder started).
std::int64_t trace_now() noexcept;

/// CPU time of the calling thread (ns): what its work costs, whatever else the machine runs.
std::int64_t thread_cpu_ns() noexcept;

/// Where trace time 0 lies on the steady clock (ns since its origin). Processes
/// under one kernel share that clock: adding this puts their trace times on one axis.
std::int64_t trace_epoch_ns() noexcept;

/// The process-wide recorder. Writers append to their thread's ring buffer; a
/// full buffer overwrites its oldest spans, so memory stays bounded. Readers
/// take spans out with a cursor of their own, often enough that no ring laps them.
class trace_recorder {
public:
  static trace_recorder& global();

  /// Turns recording on with `spans_per_thread` slots per thread (rounded up to a power of two).
  void enable(std::size_t spans_per_thread = 1 << 16);
  void disable() noexcept { enabled_.store(false, std::memory_order_relaxed); }
  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }

  /// Names an actor for its spans; `role` is its trace role (stage_role, or
  /// empty) and `position` a stage's place in its pipeline (-1: none).
  std::uint16_t register_actor(std::string name, std::string type, int node = 0, std::string role = {},
                               int position = -1);
  std::vector<actor_info> actors() const;

  /// Appends a span to the calling thread's buffer (lock-free; a no-op when disabled).
  void record(const span& s) noexcept;

  /// Mailbox depth by counting, without reaching into the actor framework: a
  /// sender calls message_sent(receiver) as it sends a data message; the receiver
  /// calls message_received(self) as it handles one, which returns how many were
  /// waiting, this one included. Lock-free; ids past `max_counted_actors` count nothing.
  static constexpr std::size_t max_counted_actors = 4096;
  void message_sent(std::uint16_t to) noexcept {
    if (to < max_counted_actors)
      queued_[to].fetch_add(1, std::memory_order_relaxed);
  }
  std::uint32_t message_received(std::uint16_t at) noexcept {
    if (at >= max_counted_actors)
      return 0;
    auto before = queued_[at].fetch_sub(1, std::memory_order_relaxed);
    return before > 0 ? static_cast<std::uint32_t>(before) : 0;
  }
  /// The id registered for `name`, if any.
  std::optional<std::uint16_t> actor_id(std::string_view name) const;
  void count(std::string name, double value, std::int32_t step = -1);

  /// Copies every span recorded since `cursor` (per-thread positions) into `out`,
  /// advancing the cursor; spans overwritten before this reader took them are
  /// skipped and counted in `missed`.
  struct cursor {
    std::vector<std::uint64_t> positions;
    std::size_t counters = 0;
    std::uint64_t missed = 0; ///< spans a ring overwrote before this reader took them
  };
  void collect(cursor& c, std::vector<span>& out, std::vector<counter_sample>* counters = nullptr) const;

  /// Forgets every span, counter and actor (tests and repeated runs in one process).
  void reset();

  struct ring; // one thread's buffer

private:
  ring& local();
  std::atomic<bool> enabled_{false};
  std::size_t capacity_ = 1 << 16;
  mutable std::mutex mtx_;
  std::vector<std::shared_ptr<ring>> rings_;
  std::vector<actor_info> actors_;
  std::vector<counter_sample> counters_;
  std::atomic<std::uint64_t> generation_{0};
  std::array<std::atomic<std::int32_t>, max_counted_actors> queued_{};
};

/// Records one span from construction to destruction (RAII).
class scoped_span {
public:
  scoped_span(std::uint16_t actor, span_kind kind, std::int32_t step = -1, std::int32_t mb = -1) noexcept {
    s_.actor = actor, s_.kind = kind, s_.step = step, s_.microbatch = mb;
    s_.begin_ns = trace_now();
  }
  scoped_span(const scoped_span&) = delete;
  scoped_span& operator=(const scoped_span&) = delete;
  ~scoped_span() {
    s_.end_ns = trace_now();
    trace_recorder::global().record(s_);
  }
  span& get() noexcept { return s_; }

private:
  span s_;
};

} // namespace troupe
