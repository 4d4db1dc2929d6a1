// `troupe launch FILE`: run a graph across the processes its `cluster:`
// section describes, as the coordinator; ends like `troupe run`.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "deploy/cluster/cluster_token.hpp"
#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "deploy/cluster/coordinator.hpp"
#include "deploy/cli/interrupt.hpp"
#include "deploy/cli/run_command.hpp"
#include "deploy/run/run_tracing.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe::cli {

namespace {

constexpr const char* launch_description = R"(Validates the graph file FILE, then runs it across the node processes its
`cluster:` section asks for: `cluster: {launcher: local, nodes: 2}` starts two
processes on this machine (`ssh` with `hosts:`, or `slurm` inside an
allocation). This process is the coordinator: it listens on cluster.address
(127.0.0.1 by default) and only accepts nodes that present the shared token
(cluster.token_file, else $TROUPE_TOKEN, else a fresh one made for this launch).
Stages are spread evenly over the nodes unless an actor names its `node:`.
The flags mean what they mean for `troupe run`; --set values reach the nodes,
each node writes its trace to the trace file with `.nodeI` before the
extension, and --dashboard serves one live dashboard of every node's actors
from this process (nodes stream their spans to it, lanes say their node).)";

constexpr const char* launch_footer = R"(Output files (--summary-json, each node's trace) and the checkpoint folder are
checked before any node starts; the checkpoint folder is locked for the run.

With `cluster.restart: N`, a run that loses a node (its process exits, or it
stops answering) stops every node and starts again on fresh node processes from
its latest complete checkpoint, at most N times, saying so in one line each time.
An elastic run whose lost node held only replicas (DDP or ZeRO-1/2, routed by
least_loaded or not; a local-update method but NoLoCo's random routes) goes on
instead and starts that node alone again: its replicas take a
live replica's state and rejoin at a step the loader names (at most N restarts).
Such a run needs no checkpoints for that; without them, losing a node that runs
more (the loader's) stops it.

Ctrl-C (SIGINT) or SIGTERM stops every node cleanly (traces written, the last
checkpoint named); a second Ctrl-C ends at once.

Exit codes: 0 success, 1 the run failed (a node lost, an actor failed, a trace not written),
2 invalid graph or arguments, an output that cannot be written, a checkpoint folder in use;
130/143 stopped by SIGINT/SIGTERM.
)";

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string{"troupe"} : p.string();
}

int launch(run_args& ra) {
  if (!kernel_target_ok("launch")) // the nodes it starts here inherit the variable
    return bad_input;
  const auto& trace = ra.trace;
  cluster::coordinator_options o;
  const run_args as_given = ra; // each restart loads the graph again from these, resuming
  auto loaded = load_run_graph("launch", ra, o.timeout);
  if (!loaded.graph)
    return loaded.exit_code;
  const auto& g = *loaded.graph;
  // Absolute, so every node writes where this folder's path points, whatever its own folder.
  auto traces = trace_file(g, trace);
  if (!traces.empty())
    traces = std::filesystem::absolute(traces).string();
  std::vector<std::string> outputs{ra.summary};
  for (int i = 0; !traces.empty() && i < g.cluster.nodes; ++i)
    outputs.push_back(node_trace_file(traces, i)); // the nodes write these (a shared file system)
  auto ckpt_lock = prepare_run("launch", g, outputs, ra.restart);
  if (!ckpt_lock)
    return bad_input;
  if (!g.cluster.token_path.empty()) {
    auto t = cluster::read_token_file(g.cluster.token_path.string());
    if (!t) {
      fmt::print(stderr, "troupe launch: {}\n", error_message(t.error()));
      return bad_input;
    }
    o.token = *t;
  } else if (const char* env = std::getenv("TROUPE_TOKEN"); env && *env) {
    o.token = env;
  } else {
    o.token = cluster::fresh_token();
  }
  auto kind = net::parse_transport(g.cluster.transport);
  if (!kind) {
    fmt::print(stderr, "troupe launch: {}\n", error_message(kind.error()));
    return bad_input;
  }
  o.transport = *kind;
  o.graph_file = ra.graph.file;
  o.overrides = ra.graph.overrides();
  o.resume = ra.resume.empty() ? std::string{} : std::filesystem::absolute(ra.resume).string();
  o.troupe_exe = self_exe();
  o.trace_file = traces;
  o.trace_buffer = trace.buffer;
  o.threads = ra.threads;
  auto tracing = run_tracing::start_coordinator(g, trace);
  if (!tracing) {
    fmt::print(stderr, "troupe launch: {}\n", error_message(tracing.error()));
    return runtime_failure;
  }
  o.dashboard = (*tracing)->dashboard();
  interrupt_guard stop_on_signal;
  o.interrupt = &interrupt_guard::signal();
  auto result = cluster::run_coordinator(g, o);
  // cluster.restart: a run that lost a node starts again on fresh node
  // processes from its latest complete checkpoint (torchrun's --max-restarts).
  std::optional<graph_spec> again; // the graph of the latest restart
  std::int64_t restarts = 0;
  while (!result && is_error(result.error(), errc::node_lost) && restarts < g.cluster.restart &&
         interrupt_guard::signal().load() == 0) {
    if (g.checkpoint.every <= 0 || g.checkpoint.dir.empty()) { // check allows that only in an elastic run
      fmt::print(stderr,
                 "troupe launch: cluster.restart takes back only a lost replica in this run: it keeps no "
                 "checkpoints to restart the whole run from (give `checkpoint: {{dir: DIR, every: N}}` for that), "
                 "so it stops\n");
      std::fflush(stderr);
      break;
    }
    ++restarts;
    // cluster.restart_delay: the lost machine takes this long to come back.
    for (auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(g.cluster.restart_delay);
         std::chrono::steady_clock::now() < until && interrupt_guard::signal().load() == 0;)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto from = find_checkpoint(g.checkpoint.dir_path);
    if (!from) { // lost before the first checkpoint was complete
      fmt::print(stderr, "troupe launch: restart {} of {}: no checkpoint in {} is complete yet ({}); starting over\n",
                 restarts, g.cluster.restart, g.checkpoint.dir_path.string(), error_message(from.error()));
    } else {
      fmt::print(stderr, "troupe launch: restart {} of {}: resuming from {} after step {}\n", restarts,
                 g.cluster.restart, from->folder.string(), from->step);
    }
    std::fflush(stderr);
    run_args next = as_given;
    if (from)
      next.resume = g.checkpoint.dir_path.string();
    auto reloaded = load_run_graph("launch", next, o.timeout);
    if (!reloaded.graph) {
      if (reloaded.exit_code == ok) // the checkpoint is the last step: the run had finished
        break;
      return reloaded.exit_code;
    }
    again = std::move(reloaded.graph);
    o.overrides = next.graph.overrides();
    o.resume = next.resume.empty() ? std::string{} : std::filesystem::absolute(next.resume).string();
    result = cluster::run_coordinator(*again, o);
  }
  if (result)
    result->restarts = restarts;
  auto trace_err = (*tracing)->finish();
  if (trace_err)
    fmt::print(stderr, "troupe launch: {}\n", error_message(trace_err));
  auto rc = report_run("launch", again ? *again : g, ra.graph.file, result, ra.summary);
  return rc == ok && trace_err ? runtime_failure : rc;
}

} // namespace

command_action define_launch(CLI::App& app) {
  auto a = std::make_shared<run_args>();
  describe(app, launch_description, std::string{launch_footer} + "\n" + paths_help);
  add_run_args(app, *a, " on each node");
  return [a] { return launch(*a); };
}

} // namespace troupe::cli
