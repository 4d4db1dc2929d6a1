// The control frames between the coordinator (`troupe launch`) and its node
// agents (`troupe node`), over an authenticated runtime/transport connection.
//
//   node -> coordinator   hello{node, host, pid, data port}; heartbeat every second
//   coordinator -> node   plan{graph file, overrides, every node's data address}
//   node -> coordinator   ready (its actors spawned, channels open, connect answered)
//   coordinator -> node   start
//   node -> coordinator   done{run_summary} / failed{failure_msg} / checkpoint{checkpoint_msg}
//   coordinator -> node   stop (the run is over: shut down and exit)
// A node that loses its coordinator stops its actors and exits; a coordinator
// that loses a node (closed connection or no heartbeat) stops every node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/messages.hpp"
#include "runtime/transport.hpp"

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
};

struct hello_msg {
  std::int32_t node = 0;
  std::string host;         ///< the node's host name, for messages
  std::int64_t pid = 0;
  std::string data_host;    ///< where its data server listens
  std::uint16_t data_port = 0;
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
  std::vector<node_address> nodes;      ///< data server of every node, by index
};

/// Seconds between heartbeats, and silence after which a node counts as lost.
inline constexpr double heartbeat_interval_s = 1.0;
inline constexpr double heartbeat_timeout_s = 4.0;

net::frame encode(const hello_msg& m);
net::frame encode(const plan_msg& m);
net::frame encode(const run_summary& m);
net::frame encode(const failure_msg& m);
net::frame encode(const checkpoint_msg& m);
/// A frame with no fields: ready, start, stop, heartbeat.
net::frame encode(control_kind k);

/// Decoders; each throws malformed_input (runtime/bytes.hpp) on bad input.
hello_msg decode_hello(const net::frame& f);
plan_msg decode_plan(const net::frame& f);
run_summary decode_summary(const net::frame& f);
failure_msg decode_failure(const net::frame& f);
checkpoint_msg decode_checkpoint(const net::frame& f);

/// FNV-1a of a file's bytes (0 when unreadable).
std::uint64_t file_hash(const std::string& path);

} // namespace troupe::cluster
