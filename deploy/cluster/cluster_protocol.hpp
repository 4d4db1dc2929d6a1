// The control frames between the coordinator (`troupe launch`) and its node
// agents (`troupe node`), over an authenticated runtime/transport connection.
//
//   node -> coordinator   hello{node, host, pid, data port}; heartbeat every second
//   coordinator -> node   plan{graph file, overrides, every node's data address}
//   node -> coordinator   ready (its actors spawned, channels open, connect answered)
//   coordinator -> node   start
//   node -> coordinator   done{run_summary} / failed{failure_msg} / checkpoint{checkpoint_msg}
//   coordinator -> node   stop (the run is over: shut down and exit)
// When the plan asks for a trace stream (`troupe launch --dashboard`):
//   node -> coordinator   spans{seq, dropped, new actors, spans, counters} a few times a second
//   coordinator -> node   spans_ack{seq}: a node with max_unacked_batches unanswered drops instead
//   coordinator -> node   clock{its time}; the node answers clock{that time, its time} at once
//                         (only to nodes on another machine: the offset between steady clocks)
// A node that loses its coordinator stops its actors and exits; a coordinator
// that loses a node (closed connection or no heartbeat) stops every node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/actor/messages.hpp"
#include "runtime/trace/trace_export.hpp"
#include "runtime/transport/transport.hpp"

namespace troupe::cluster {

enum class control_kind : std::uint16_t {
  hello = 100,
  plan,
  ready,
  start,
  done,
  failed,
  checkpoint,
  stop,
  heartbeat,
  spans,
  spans_ack,
  clock,
  replica_lost,  ///< coordinator -> nodes: a data-parallel replica left the run (elastic local-update training)
};

struct hello_msg {
  std::int32_t node = 0;
  std::string host;         ///< the node's host name, for messages
  std::int64_t pid = 0;
  std::string data_host;    ///< where its data server listens
  std::uint16_t data_port = 0;
  /// Names the node's steady clock (the kernel's boot id): processes that share
  /// it need no clock offset. Empty when unknown.
  std::string clock_domain;
};

struct node_address {
  std::string host;
  std::uint16_t port = 0;
};

struct plan_msg {
  std::string graph_file;               ///< absolute path (a shared file system is assumed)
  std::uint64_t graph_hash = 0;         ///< of the file's bytes: every node must read the same graph
  std::vector<std::string> overrides;   ///< `--set` values, in order
  std::string resume;                   ///< checkpoint folder to resume from, or empty
  std::string transport;                ///< tcp or ucx
  std::string trace_file;               ///< where node traces go (`.nodeI` added), or empty
  std::uint64_t trace_buffer = 0;       ///< spans kept per thread
  bool stream_trace = false;            ///< send spans to the coordinator (its live dashboard)
  std::vector<node_address> nodes;      ///< data server of every node, by index
};

/// What a node recorded since its last batch, for the coordinator's dashboard.
/// Times are on the node's steady clock (ns since its origin, trace_epoch_ns()
/// added); actor ids are the node's own.
struct spans_msg {
  std::uint64_t seq = 0;   ///< batches sent so far, this one included
  /// Its actors are those no earlier batch named; `dropped` counts the spans
  /// lost so far (overwritten in a ring, or not sent while the coordinator lagged).
  trace_snapshot batch;
};

/// A clock probe (node_ns 0) and the node's answer to it.
struct clock_msg {
  std::int64_t coordinator_ns = 0;  ///< the coordinator's steady clock when it sent the probe
  std::int64_t node_ns = 0;         ///< the node's steady clock when it answered
};

/// A node's steady clock relative to the coordinator's, from clock probes (as
/// NTP does it): a probe sent at coordinator time t0, answered at node time tn
/// and back at t1 puts the offset at tn - (t0 + t1) / 2, wrong by at most
/// (t1 - t0) / 2 (the answer's time is somewhere inside the round trip). The
/// estimate is the sample with the shortest round trip among the last
/// `window`: one delayed answer does not move it, slow drift is followed.
class clock_estimate {
public:
  static constexpr std::size_t window = 16;
  /// Adds the node's answer, received at coordinator time `received_ns`;
  /// malformed_input for a negative time or a probe from the future.
  void add(const clock_msg& answer, std::int64_t received_ns);
  bool known() const noexcept { return !samples_.empty(); }
  /// Node clock minus coordinator clock (0 while unknown).
  std::int64_t offset_ns() const noexcept;
  /// How far off offset_ns() can be: half the best round trip.
  std::int64_t error_ns() const noexcept;

private:
  struct sample {
    std::int64_t rtt, offset;
  };
  const sample* best() const noexcept;
  std::vector<sample> samples_;  ///< oldest first
};

/// Seconds between a node's span batches; the most spans one batch carries (48
/// bytes each, well under net::max_meta_bytes with its actors and counters);
/// the batches a node sends without an ack before it drops spans instead.
inline constexpr double spans_interval_s = 0.25;
inline constexpr std::size_t max_batch_spans = 16384;
inline constexpr std::size_t max_batch_counters = 1024;
inline constexpr std::uint64_t max_unacked_batches = 4;

/// Seconds between heartbeats, and silence after which a node counts as lost.
inline constexpr double heartbeat_interval_s = 1.0;
inline constexpr double heartbeat_timeout_s = 4.0;

net::frame encode(const hello_msg& m);
net::frame encode(const plan_msg& m);
net::frame encode(const run_summary& m);
net::frame encode(const failure_msg& m);
net::frame encode(const checkpoint_msg& m);
net::frame encode(const spans_msg& m);
net::frame encode(const clock_msg& m);
/// The coordinator has taken batch `seq`.
net::frame encode_spans_ack(std::uint64_t seq);
/// A frame with no fields: ready, start, stop, heartbeat.
net::frame encode(control_kind k);
/// `replica_lost`: replica `replica` left the run.
net::frame encode_replica_lost(std::int32_t replica);

/// Decoders; each throws malformed_input (runtime/transport/bytes.hpp) on bad input.
hello_msg decode_hello(const net::frame& f);
plan_msg decode_plan(const net::frame& f);
run_summary decode_summary(const net::frame& f);
failure_msg decode_failure(const net::frame& f);
checkpoint_msg decode_checkpoint(const net::frame& f);
/// Also rejects an unknown span kind; span actor ids are checked by the receiver,
/// which knows the actors of earlier batches.
spans_msg decode_spans(const net::frame& f);
clock_msg decode_clock(const net::frame& f);
std::uint64_t decode_spans_ack(const net::frame& f);
std::int32_t decode_replica_lost(const net::frame& f);

/// The steady clock's current reading, in ns since its origin (what spans_msg and clock_msg carry).
std::int64_t steady_now_ns() noexcept;
/// This machine's clock domain for hello_msg: $TROUPE_CLOCK_DOMAIN when set
/// (empty: unknown, so this node's clock is always probed; for processes that
/// share a kernel but not its clock, as in time namespaces), else the kernel's
/// boot id, or empty.
std::string clock_domain();

/// FNV-1a of a file's bytes (0 when unreadable).
std::uint64_t file_hash(const std::string& path);

} // namespace troupe::cluster
