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
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include "runtime/actor/errors.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/trace/trace_export.hpp"
#include "runtime/transport/transport.hpp"
#include "runtime/transport/wire.hpp"

namespace troupe {

// The trace's records as a node streams them (runtime/trace/trace.hpp keeps
// them plain: it has no CAF).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, span& x) {
  return f(
    caf::meta::type_name("span"), x.begin_ns, x.end_ns, x.bytes, x.flow, x.step, x.microbatch, x.actor, x.kind,
    x.flow_end, x.mailbox, caf::meta::load_callback([&]() -> caf::error {
      if (x.kind > span_kind::other)
        return make_error(errc::malformed_frame, "span kind " + std::to_string(static_cast<int>(x.kind)) +
                                                   " (known: 0 to " +
                                                   std::to_string(static_cast<int>(span_kind::other)) + ")");
      if (x.flow_end > 1)
        return make_error(errc::malformed_frame, "a flag of " + std::to_string(x.flow_end) + " (expected 0 or 1)");
      if (x.end_ns < x.begin_ns)
        return make_error(errc::malformed_frame, "a span that ends (" + std::to_string(x.end_ns) +
                                                   " ns) before it begins (" + std::to_string(x.begin_ns) + " ns)");
      return {};
    }));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, counter_sample& x) {
  return f(caf::meta::type_name("counter_sample"), x.t_ns, x.name, x.value, x.step);
}
/// `node` stays out: the coordinator knows which node sent it.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, actor_info& x) {
  return f(caf::meta::type_name("actor_info"), x.id, x.name, x.type, x.role, x.position);
}

} // namespace troupe

namespace troupe::cluster {

/// Thrown by the coordinator's and the node agent's handlers for a frame they
/// refuse (a decode error, a frame out of turn); each handler's boundary turns
/// it into a failure of the run or a rejected connection.
struct malformed_input : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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
  replica_lost, ///< coordinator -> nodes: a data-parallel replica left the run (elastic local-update training)
  node_back,    ///< coordinator -> nodes: a lost node runs again, here: reconnect the channels to its actors
  reconnected,  ///< node -> coordinator: its channels to that node are reconnected
  replica_back, ///< coordinator -> nodes: the lost replica's node is back; the loader decides when it rejoins
  rejoining,    ///< node -> coordinator: the loader's decision (the step, the donor)
};

struct hello_msg {
  std::int32_t node = 0;
  std::string host; ///< the node's host name, for messages
  std::int64_t pid = 0;
  std::string data_host; ///< where its data server listens
  std::uint16_t data_port = 0;
  /// Names the node's steady clock (the kernel's boot id): processes that share
  /// it need no clock offset. Empty when unknown.
  std::string clock_domain;
};

struct node_address {
  std::string host;
  std::uint16_t port = 0; ///< 0 in a joiner's plan: that node is down (node_back says where it is once back)
};

struct plan_msg {
  std::string graph_file;             ///< absolute path (a shared file system is assumed)
  std::uint64_t graph_hash = 0;       ///< of the file's bytes: every node must read the same graph
  std::vector<std::string> overrides; ///< `--set` values, in order
  std::string resume;                 ///< checkpoint folder to resume from, or empty
  std::string transport;              ///< tcp or ucx
  std::string trace_file;             ///< where node traces go (`.nodeI` added), or empty
  std::uint64_t trace_buffer = 0;     ///< spans kept per thread
  bool stream_trace = false;          ///< send spans to the coordinator (its live dashboard)
  std::vector<node_address> nodes;    ///< data server of every node, by index
  /// The node replaces a lost one in a running elastic run (#26): its replica's
  /// actors wait for a live replica's state instead of starting fresh.
  bool joining = false;
};

/// What a node recorded since its last batch, for the coordinator's dashboard.
/// Times are on the node's steady clock (ns since its origin, trace_epoch_ns()
/// added); actor ids are the node's own.
struct spans_msg {
  std::uint64_t seq = 0; ///< batches sent so far, this one included
  /// Its actors are those no earlier batch named; `dropped` counts the spans
  /// lost so far (overwritten in a ring, or not sent while the coordinator lagged).
  trace_snapshot batch;
};

/// A clock probe (node_ns 0) and the node's answer to it.
struct clock_msg {
  std::int64_t coordinator_ns = 0; ///< the coordinator's steady clock when it sent the probe
  std::int64_t node_ns = 0;        ///< the node's steady clock when it answered
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
  std::vector<sample> samples_; ///< oldest first
};

/// Seconds between a node's span batches; the most spans one batch carries (48
/// bytes each, wire::min_size<span>(): well under net::max_meta_bytes with its
/// actors and counters, which a test checks);
/// the batches a node sends without an ack before it drops spans instead.
inline constexpr double spans_interval_s = 0.25;
inline constexpr std::size_t max_batch_spans = 16384;
inline constexpr std::size_t max_batch_counters = 1024;
inline constexpr std::uint64_t max_unacked_batches = 4;

/// Seconds between heartbeats, and silence after which a node counts as lost.
inline constexpr double heartbeat_interval_s = 1.0;
inline constexpr double heartbeat_timeout_s = 4.0;

/// The coordinator has taken batch `seq`.
struct spans_ack_msg {
  std::uint64_t seq = 0;
};

/// A data-parallel replica left the run (elastic local-update training), or
/// its node is back (replica_back_msg).
struct replica_lost_msg {
  std::int32_t replica = 0;
};
struct replica_back_msg {
  std::int32_t replica = 0;
};

/// Node `node` runs again, its data server at `at` (coordinator -> nodes); and a
/// node's answer that its channels to it are reconnected (`at` empty).
struct node_back_msg {
  std::int32_t node = 0;
  node_address at;
};
struct reconnected_msg {
  std::int32_t node = 0;
};

/// The loader's decision on a replica whose node is back: it trains from step
/// `step` on with replica `donor`'s state; `step` -1: it cannot rejoin (`why`).
struct rejoining_msg {
  std::int32_t replica = 0;
  std::int64_t step = -1;
  std::int32_t donor = -1;
  std::string why;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hello_msg& x) {
  return f(caf::meta::type_name("hello_msg"), x.node, x.host, x.pid, x.data_host, x.data_port, x.clock_domain);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_address& x) {
  return f(caf::meta::type_name("node_address"), x.host, x.port);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, plan_msg& x) {
  return f(caf::meta::type_name("plan_msg"), x.graph_file, x.graph_hash, x.overrides, x.resume, x.transport,
           x.trace_file, x.trace_buffer, x.stream_trace, x.nodes, x.joining);
}
/// Only what a batch carries (a file's `cut_short` and `epoch_ns` are the reader's).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spans_msg& x) {
  return f(caf::meta::type_name("spans_msg"), x.seq, x.batch.dropped, x.batch.actors, x.batch.spans, x.batch.counters);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, clock_msg& x) {
  return f(caf::meta::type_name("clock_msg"), x.coordinator_ns, x.node_ns);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spans_ack_msg& x) {
  return f(caf::meta::type_name("spans_ack_msg"), x.seq);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_lost_msg& x) {
  return f(caf::meta::type_name("replica_lost_msg"), x.replica, caf::meta::load_callback([&] {
             return x.replica >= 0
                      ? caf::error{}
                      : make_error(errc::malformed_frame, "replica_lost names replica " + std::to_string(x.replica));
           }));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_back_msg& x) {
  return f(caf::meta::type_name("replica_back_msg"), x.replica, caf::meta::load_callback([&] {
             return x.replica >= 0
                      ? caf::error{}
                      : make_error(errc::malformed_frame, "replica_back names replica " + std::to_string(x.replica));
           }));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_back_msg& x) {
  return f(caf::meta::type_name("node_back_msg"), x.node, x.at, caf::meta::load_callback([&] {
             return x.node >= 0 ? caf::error{}
                                : make_error(errc::malformed_frame, "node_back names node " + std::to_string(x.node));
           }));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reconnected_msg& x) {
  return f(caf::meta::type_name("reconnected_msg"), x.node, caf::meta::load_callback([&] {
             return x.node >= 0 ? caf::error{}
                                : make_error(errc::malformed_frame, "reconnected names node " + std::to_string(x.node));
           }));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rejoining_msg& x) {
  return f(caf::meta::type_name("rejoining_msg"), x.replica, x.step, x.donor, x.why, caf::meta::load_callback([&] {
             return x.replica >= 0 && x.step >= -1 && x.donor >= -1
                      ? caf::error{}
                      : make_error(errc::malformed_frame,
                                   "rejoining of replica " + std::to_string(x.replica) + " malformed");
           }));
}

/// What each control kind carries (ready, start, stop and heartbeat carry
/// nothing). A new control message is one line here plus its inspect().
using control_table = wire::table<
  wire::entry<control_kind::hello, hello_msg>, wire::entry<control_kind::plan, plan_msg>,
  wire::entry<control_kind::done, run_summary>, wire::entry<control_kind::failed, failure_msg>,
  wire::entry<control_kind::checkpoint, checkpoint_msg>, wire::entry<control_kind::spans, spans_msg>,
  wire::entry<control_kind::spans_ack, spans_ack_msg>, wire::entry<control_kind::clock, clock_msg>,
  wire::entry<control_kind::replica_lost, replica_lost_msg>, wire::entry<control_kind::node_back, node_back_msg>,
  wire::entry<control_kind::reconnected, reconnected_msg>, wire::entry<control_kind::replica_back, replica_back_msg>,
  wire::entry<control_kind::rejoining, rejoining_msg>>;

/// The frame of a control message (a type of control_table).
template <class T>
net::frame encode(const T& m) {
  return wire::encode<control_table, T>(m);
}
/// A frame with no fields: ready, start, stop, heartbeat.
net::frame encode(control_kind k);

/// `f` as control message T: an error (what and where) when it is another kind or malformed.
template <class T>
caf::expected<T> decode(const net::frame& f) {
  return wire::decode<control_table, T>(f);
}

/// decode<T>(f)'s message, or malformed_input with its error: for the handlers that refuse by throwing.
template <class T>
T decode_or_throw(const net::frame& f) {
  auto m = decode<T>(f);
  if (!m)
    throw malformed_input(error_message(m.error()));
  return std::move(*m);
}

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
