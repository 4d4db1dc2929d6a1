// The node's trace stream (deploy/run/span_stream.hpp).
#include "deploy/run/span_stream.hpp"

#include <algorithm>
#include <chrono>

#include "deploy/cluster/cluster_protocol.hpp"

namespace troupe::cluster {

namespace {

/// Spans kept waiting for the ack window to open, at most: older ones are dropped.
constexpr std::size_t max_pending_spans = max_unacked_batches * max_batch_spans;

template <class T>
std::vector<T> take_front(std::vector<T>& v, std::size_t n) {
  n = std::min(n, v.size());
  std::vector<T> out(std::make_move_iterator(v.begin()),
                     std::make_move_iterator(v.begin() + static_cast<std::ptrdiff_t>(n)));
  v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
  return out;
}

} // namespace

span_streamer::span_streamer(std::shared_ptr<net::connection> to, const std::atomic<std::uint64_t>& acked)
    : to_(std::move(to)), acked_(acked) {
  thread_ = std::jthread{[this](std::stop_token st) {
    while (!st.stop_requested()) {
      for (int i = 0; i < 5 && !st.stop_requested(); ++i)
        std::this_thread::sleep_for(std::chrono::duration<double>(spans_interval_s / 5));
      if (!st.stop_requested())
        send_batches(false);
    }
  }};
}

span_streamer::~span_streamer() {
  thread_.request_stop();
  if (thread_.joinable())
    thread_.join();
}

void span_streamer::finish() {
  thread_.request_stop();
  if (thread_.joinable())
    thread_.join();
  send_batches(true);
}

void span_streamer::send_batches(bool last) {
  auto& r = trace_recorder::global();
  r.collect(cursor_, pending_, &pending_counters_);
  if (pending_.size() > max_pending_spans) {
    auto cut = pending_.size() - max_pending_spans;
    lost_ += cut;
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(cut));
  }
  if (pending_counters_.size() > 4 * max_batch_counters) // a counter is one per step: only a stall gets here
    pending_counters_.erase(pending_counters_.begin(),
                            pending_counters_.end() - static_cast<std::ptrdiff_t>(4 * max_batch_counters));
  auto actors = r.actors();
  while (last || sent_ - acked_.load(std::memory_order_acquire) < max_unacked_batches) {
    bool fresh_actors = actors_sent_ < actors.size();
    if (pending_.empty() && pending_counters_.empty() && !fresh_actors)
      return;
    spans_msg m;
    m.seq = sent_ + 1;
    auto& b = m.batch;
    b.actors.assign(actors.begin() + static_cast<std::ptrdiff_t>(actors_sent_), actors.end());
    b.spans = take_front(pending_, max_batch_spans);
    b.counters = take_front(pending_counters_, max_batch_counters);
    auto epoch = trace_epoch_ns();
    for (auto& s : b.spans)
      s.begin_ns += epoch, s.end_ns += epoch;
    for (auto& c : b.counters)
      c.t_ns += epoch;
    b.dropped = cursor_.missed + lost_;
    auto f = encode(m);
    actors_sent_ = actors.size();
    if (f.meta.size() > net::max_meta_bytes) { // only with absurdly long names: never risk the connection
      lost_ += b.spans.size();
      continue;
    }
    sent_ = m.seq;
    to_->send(std::move(f));
  }
  // The coordinator is behind: what waits now is dropped, not queued.
  lost_ += pending_.size();
  pending_.clear();
}

} // namespace troupe::cluster
