// The coordinator of a multi-process run (`troupe launch`): it listens for
// node agents, starts them through a launcher, hands each its part of the
// graph, starts the run, and turns a lost node into a clean, named failure.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "deploy/run/run_graph.hpp"
#include "runtime/trace/dashboard_server.hpp"
#include "runtime/graph/graph_spec.hpp"
#include "runtime/transport/transport.hpp"

namespace troupe::cluster {

struct coordinator_options {
  std::string graph_file;             ///< as given; sent to nodes as an absolute path
  std::vector<std::string> overrides; ///< `--set` values, passed on to every node
  std::string resume;                 ///< checkpoint folder to resume from, or empty
  std::string token;                  ///< the shared secret nodes must present
  net::transport_kind transport = net::transport_kind::tcp;
  std::string troupe_exe;             ///< the program nodes run (this one, normally)
  std::string trace_file;             ///< each node writes its trace here, `.nodeI` before the extension
  std::size_t trace_buffer = 1 << 16; ///< spans kept per thread on each node
  std::int64_t threads = 0;           ///< actor-system worker threads on each node; 0 = the node's default
  /// When set (a server from dashboard_server::start_ingest), nodes stream their
  /// spans here, their actors remapped so no two nodes share a lane and their
  /// times moved onto this process's clock (see clock_estimate).
  dashboard_server* dashboard = nullptr;
  std::chrono::milliseconds join_timeout{60'000}; ///< for every node to connect and get ready
  std::chrono::milliseconds timeout{0};           ///< for the whole run; 0 = no limit
  /// When it turns non-zero (a signal number), every node is stopped and the
  /// run returns errc::interrupted (see run_options::interrupt).
  const std::atomic<int>* interrupt = nullptr;
};

/// Runs `g` across `g.cluster.nodes` node processes started with
/// `g.cluster.launcher`, and returns what `run_graph` would. Errors name the
/// node (index, host, pid) and the actors it ran.
caf::expected<run_result> run_coordinator(const graph_spec& g, const coordinator_options& o);

} // namespace troupe::cluster
