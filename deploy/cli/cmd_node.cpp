// `troupe node --coordinator HOST:PORT`: one node of a multi-process run,
// started by a launcher; it does what the coordinator tells it.
#include <signal.h>

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "deploy/cluster/cluster_token.hpp"
#include "deploy/cli/commands.hpp"
#include "deploy/cluster/node_agent.hpp"
#include "deploy/cli/run_graph.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe::cli {

namespace {

constexpr const char* node_help = R"(usage: troupe node --coordinator HOST:PORT [--node I] [--token-file F | --token-stdin]
                   [--transport tcp|ucx] [--listen ADDRESS]

Joins the coordinator of a `troupe launch` as node I and runs that node's
actors. Launchers start it; you rarely type it. The shared token comes from
--token-file, --token-stdin, or $TROUPE_TOKEN; the node index from --node or,
under srun, $SLURM_PROCID.

Exit codes: 0 the run finished, 1 it failed or the coordinator was lost, 2 bad arguments.
)";

bool to_int(std::string_view s, int& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size();
}

} // namespace

int run_node(std::span<char*> args) {
  std::string coordinator, node, token_file, transport = "tcp", listen;
  bool token_stdin = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= args.size())
        return false;
      out = args[++i];
      return true;
    };
    bool good = true;
    if (a == "-h" || a == "--help") {
      fmt::print("{}", node_help);
      return ok;
    } else if (a == "--coordinator")
      good = value(coordinator);
    else if (a == "--node")
      good = value(node);
    else if (a == "--token-file")
      good = value(token_file);
    else if (a == "--transport")
      good = value(transport);
    else if (a == "--listen")
      good = value(listen);
    else if (a == "--token-stdin")
      token_stdin = true;
    else {
      fmt::print(stderr, "troupe node: unknown option '{}'\n{}", a, node_help);
      return bad_input;
    }
    if (!good) {
      fmt::print(stderr, "troupe node: {} needs a value\n", a);
      return bad_input;
    }
  }
  cluster::node_options o;
  auto colon = coordinator.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !to_int(std::string_view{coordinator}.substr(colon + 1), port) || port <= 0 ||
      port > 65535) {
    fmt::print(stderr, "troupe node: --coordinator expects HOST:PORT, got '{}'\n", coordinator);
    return bad_input;
  }
  o.coordinator_host = coordinator.substr(0, colon);
  o.coordinator_port = static_cast<std::uint16_t>(port);
  if (node.empty())
    if (const char* p = std::getenv("SLURM_PROCID"))
      node = p;
  if (!to_int(node, o.node) || o.node < 0) {
    fmt::print(stderr, "troupe node: give the node index with --node I (or run under srun, which sets SLURM_PROCID)\n");
    return bad_input;
  }
  caf::expected<std::string> token = std::string{};
  if (!token_file.empty())
    token = cluster::read_token_file(token_file);
  else if (token_stdin)
    token = cluster::read_token_stdin();
  else if (const char* env = std::getenv("TROUPE_TOKEN"); env && *env)
    token = std::string{env};
  else
    token = make_error(errc::invalid_argument, "no token: give --token-file, --token-stdin or set $TROUPE_TOKEN");
  if (!token) {
    fmt::print(stderr, "troupe node {}: {}\n", o.node, error_message(token.error()));
    return bad_input;
  }
  o.token = *token;
  auto kind = net::parse_transport(transport);
  if (!kind) {
    fmt::print(stderr, "troupe node: {}\n", error_message(kind.error()));
    return bad_input;
  }
  o.transport = *kind;
  o.listen_address = listen;
  o.stop_on_stdin_eof = token_stdin;
  // A node follows its coordinator: a Ctrl-C in the terminal reaches every
  // process of the launch, and the coordinator turns it into a clean stop.
  // The stop frame, stdin closing (ssh), the parent's death and SIGTERM end a node.
  ::signal(SIGINT, SIG_IGN);
  return cluster::run_node(o);
}

} // namespace troupe::cli
