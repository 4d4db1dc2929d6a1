// The node agent (`troupe node`): one per process of a multi-process run. It
// joins the coordinator, spawns this node's actors, links them to the other
// nodes through channel actors, and reports their progress back.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/transport/transport.hpp"

namespace troupe::cluster {

struct node_options {
  std::string coordinator_host;
  std::uint16_t coordinator_port = 0;
  int node = 0;               ///< this node's index
  std::string token;          ///< the shared secret
  std::string listen_address; ///< where the data server listens; empty: see run_node
  net::transport_kind transport = net::transport_kind::tcp;
  bool stop_on_stdin_eof = false; ///< ssh nodes: the launcher's session ending closes stdin
  std::int64_t threads = 0;       ///< actor-system worker threads; 0 = runtime_options_from_env's
};

/// Runs the node until the coordinator says stop (exit code 0) or the run
/// fails or the coordinator is lost (1). Nothing it spawned outlives it.
/// With no listen address, it listens on 127.0.0.1 when the coordinator is
/// on this machine's loopback, else on the address this host's name resolves to.
int run_node(const node_options& o);

} // namespace troupe::cluster
