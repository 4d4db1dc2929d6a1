// `troupe node --coordinator HOST:PORT`: one node of a multi-process run,
// started by a launcher; it does what the coordinator tells it.
#include <signal.h>

#include <charconv>
#include <cstdlib>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "deploy/cluster/cluster_token.hpp"
#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "deploy/cluster/node_agent.hpp"
#include "deploy/run/run_graph.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/graph/limits.hpp"

namespace troupe::cli {

namespace {

constexpr const char* node_description = R"(Joins the coordinator of a `troupe launch` as node I and runs that node's
actors. Launchers start it; you rarely type it. The shared token comes from
--token-file, --token-stdin, or $TROUPE_TOKEN; the node index from --node or,
under srun, $SLURM_PROCID.)";

constexpr const char* node_footer =
  "Exit codes: 0 the run finished, 1 it failed or the coordinator was lost, 2 bad arguments.\n";

/// What `troupe node`'s command line asked for.
struct node_cli {
  std::string coordinator, token_file, transport = "tcp", listen;
  int node = -1;
  bool token_stdin = false;
  std::int64_t threads = 0;
};

bool to_int(std::string_view s, int& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size();
}

/// HOST:PORT with a port from 1 to 65535.
std::string checked_coordinator(const std::string& text) {
  auto colon = text.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !to_int(std::string_view{text}.substr(colon + 1), port) || port <= 0 ||
      port > 65535)
    return fmt::format("expected HOST:PORT with a port from 1 to 65535, got '{}'", text);
  return {};
}

int node(const node_cli& a) {
  if (!kernel_target_ok("node"))
    return bad_input;
  cluster::node_options o;
  auto colon = a.coordinator.rfind(':');
  int port = 0;
  to_int(std::string_view{a.coordinator}.substr(colon + 1), port); // checked by the parse
  o.coordinator_host = a.coordinator.substr(0, colon);
  o.coordinator_port = static_cast<std::uint16_t>(port);
  o.node = a.node;
  if (const char* p = std::getenv("SLURM_PROCID"); o.node < 0 && p && !to_int(p, o.node))
    o.node = -1;
  if (o.node < 0) {
    fmt::print(stderr, "troupe node: give the node index with --node I (or run under srun, which sets SLURM_PROCID)\n");
    return bad_input;
  }
  caf::expected<std::string> token = std::string{};
  if (!a.token_file.empty())
    token = cluster::read_token_file(a.token_file);
  else if (a.token_stdin)
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
  auto kind = net::parse_transport(a.transport);
  if (!kind) {
    fmt::print(stderr, "troupe node: {}\n", error_message(kind.error()));
    return bad_input;
  }
  o.transport = *kind;
  o.listen_address = a.listen;
  o.stop_on_stdin_eof = a.token_stdin;
  o.threads = a.threads;
  // A node follows its coordinator: a Ctrl-C in the terminal reaches every
  // process of the launch, and the coordinator turns it into a clean stop.
  // The stop frame, stdin closing (ssh), the parent's death and SIGTERM end a node.
  ::signal(SIGINT, SIG_IGN);
  return cluster::run_node(o);
}

} // namespace

command_action define_node(CLI::App& app) {
  auto a = std::make_shared<node_cli>();
  describe(app, node_description, node_footer);
  app.add_option("--coordinator", a->coordinator, "the coordinator's address (printed by troupe launch)")
    ->option_text("HOST:PORT")
    ->required()
    ->check(CLI::Validator([](std::string& s) { return checked_coordinator(s); }, ""));
  add_count(app, "--node", a->node, 0, limits::max_nodes - 1, "this node's index (default: $SLURM_PROCID)")
    ->option_text("I");
  auto* file = app.add_option("--token-file", a->token_file, "read the shared token from F")->option_text("F");
  auto* in = app.add_flag("--token-stdin", a->token_stdin, "read the shared token from the first line of stdin");
  file->excludes(in);
  app.add_option("--transport", a->transport, "how tensor bytes travel between nodes (default tcp)")
    ->option_text("tcp|ucx");
  app
    .add_option("--listen", a->listen,
                "where this node's data server listens (default: 127.0.0.1 when\n"
                "the coordinator is on this machine's loopback, else this host's address)")
    ->option_text("ADDRESS");
  add_threads(app, a->threads);
  return [a] { return node(*a); };
}

} // namespace troupe::cli
