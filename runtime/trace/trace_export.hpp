// Writes recorded spans and counters as Chrome Trace Event JSON, which opens in
// Perfetto and chrome://tracing: a process per node, a thread per actor.
#pragma once

#include <string>
#include <vector>

#include "runtime/trace/trace.hpp"

namespace troupe {

/// Everything one trace file holds.
struct trace_snapshot {
  std::vector<actor_info> actors;
  std::vector<span> spans;
  std::vector<counter_sample> counters;
  std::uint64_t dropped = 0;
  bool cut_short = false;     ///< read from a file whose writer stopped mid-event (a crash): its last event is lost
  std::int64_t epoch_ns = -1; ///< the steady clock at time 0, when the file records it
};

/// Chrome Trace Event JSON a piece at a time, so a file can grow while a run
/// goes (trace_writer): chrome_json_head(), then events one to a line, then
/// chrome_json_tail(). Events may come in any order, but a span's flow event
/// right after it, and an actor named before the first batch of its spans.
class chrome_json_events {
public:
  /// `process_name` for node `node`.
  void add_node(int node);
  /// `thread_name` (with type and role) and `thread_sort_index` for `a`.
  void add_actor(const actor_info& a);
  /// An `X` event for `s` on node `node`'s process, and its flow event if it has one.
  void add_span(const span& s, int node);
  /// A `C` event (JSON has no NaN: a diverged loss is written as null).
  void add_counter(const counter_sample& c);
  /// The events so far, each line but the file's first preceded by ",\n"; empties the buffer.
  std::string take();

private:
  void separate();
  void emit(std::string_view event);
  std::string out_;
  bool first_ = true;
};

/// `{"displayTimeUnit":"ms","traceEvents":[` and a line break.
std::string chrome_json_head();
/// Closes the event list and records `dropped` in `otherData`, and with
/// `epoch_ns` >= 0 the steady clock's reading at the trace's time 0 (so the
/// node files of one launch line up: read_chrome_trace merges them).
std::string chrome_json_tail(std::uint64_t dropped, std::int64_t epoch_ns = -1);

/// Collects everything the global recorder holds now (`dropped`: spans its rings overwrote).
trace_snapshot snapshot_trace();

/// The snapshot as Chrome Trace Event JSON (object form, `traceEvents` sorted
/// by thread and time, with flow arrows from each send to its receive).
std::string to_chrome_json(const trace_snapshot& t);

} // namespace troupe
