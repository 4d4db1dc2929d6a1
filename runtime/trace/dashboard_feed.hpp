// The dashboard's data: every span and counter it has seen (bounded), the
// latest statistics, and the JSON frames the page's WebSocket receives.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/trace/trace_summary.hpp"

namespace troupe {

/// Where one viewer is in the feed.
struct feed_cursor {
  std::uint64_t span = 0; ///< absolute index of the next span to send
  std::size_t counter = 0;
  std::size_t actors = 0; ///< actors already sent
  bool hello = false;
  bool finished_sent = false;
};

/// Spans, counters and statistics shared by every viewer. Not thread-safe: the
/// server touches it from its one I/O thread only.
class dashboard_feed {
public:
  dashboard_feed(std::string title, bool live, std::size_t max_spans, std::int64_t tokens_per_step);

  /// Pulls what the global recorder has gathered since the last poll.
  void poll_recorder();
  /// Takes a batch from another process: `node` of a multi-process run, with
  /// times already on this process's trace clock and actor ids that node's own.
  /// Its actors get ids of their own here (so two nodes' actors never share a
  /// lane) and keep `node`; spans of actors never named are dropped and counted.
  /// `b.dropped` is the node's running total.
  void ingest(int node, trace_snapshot b);
  /// Moves the live clock to now (a feed that is only ingested, never polled).
  void tick() noexcept;
  /// Takes a finished trace whole.
  void load(trace_snapshot t);
  /// Recomputes the statistics over the last `window_ns` (live) or the whole trace.
  void update_stats(std::int64_t window_ns);

  /// The next frame for a viewer at `c` (at most `max_spans` spans), advancing it;
  /// always with the latest statistics. `more` is set when spans are still pending.
  std::string next_frame(feed_cursor& c, std::size_t max_spans, bool& more);

  const trace_summary& stats() const noexcept { return stats_; }
  void set_finished() noexcept { finished_ = true; }
  bool finished() const noexcept { return finished_; }

private:
  /// Adds fresh spans and counters (after a poll or an ingest at `now_ns_`).
  void append(std::vector<span>& spans, std::vector<counter_sample>& counters);

  std::string title_;
  bool live_;
  bool finished_ = false;
  std::size_t max_spans_;
  trace_snapshot data_;
  std::uint64_t base_ = 0; ///< absolute index of data_.spans[0]
  /// (poll time, absolute index of its first span): a span delivered by a poll
  /// ended before it, so the recent window only needs the recent polls' spans.
  std::vector<std::pair<std::int64_t, std::uint64_t>> polls_;
  std::map<std::pair<std::uint16_t, std::uint16_t>, channel_summary> edges_; ///< every channel seen
  trace_recorder::cursor cursor_;
  std::map<std::pair<int, std::uint16_t>, std::uint16_t> ingested_ids_; ///< (node, its id) -> id here
  std::map<int, std::uint64_t> node_dropped_;                           ///< each node's reported total
  std::uint64_t ingest_dropped_ = 0; ///< spans of unknown actors, or past the id space
  throughput_meter meter_;
  trace_summary stats_;
  nlohmann::json stats_frame_; ///< the latest stats, sent with every frame (null before the first)
  std::int64_t now_ns_ = 0;
};

} // namespace troupe
