// A node's trace stream to the coordinator (`troupe launch --dashboard`): the
// spans, counters and actor names its recorder gathers, a batch at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/trace/trace.hpp"
#include "runtime/transport/transport.hpp"

namespace troupe::cluster {

/// Sends a spans_msg every spans_interval_s from a thread of its own, so the
/// node's actors never wait for it (they only write their lock-free rings).
/// Bounded: with max_unacked_batches unanswered the coordinator is behind, and
/// what was recorded meanwhile is dropped and counted instead of queued.
class span_streamer {
public:
  /// Starts streaming over `to` (the control connection); the recorder must be
  /// on. `acked` is the highest batch the coordinator has acknowledged (spans_ack).
  span_streamer(std::shared_ptr<net::connection> to, const std::atomic<std::uint64_t>& acked);
  ~span_streamer();
  span_streamer(const span_streamer&) = delete;
  span_streamer& operator=(const span_streamer&) = delete;

  /// Stops the thread and sends what was recorded since the last batch, acked or not.
  void finish();

private:
  /// Collects from the recorder and sends what the ack window allows (all when `last`).
  void send_batches(bool last);

  std::shared_ptr<net::connection> to_;
  const std::atomic<std::uint64_t>& acked_;
  std::uint64_t sent_ = 0;
  std::uint64_t lost_ = 0;      ///< spans dropped here while the coordinator lagged
  std::size_t actors_sent_ = 0; ///< recorder actors named in a batch so far
  trace_recorder::cursor cursor_;
  std::vector<span> pending_;
  std::vector<counter_sample> pending_counters_;
  std::jthread thread_;
};

} // namespace troupe::cluster
