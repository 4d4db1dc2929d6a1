// `troupe launch FILE`: run a graph across the processes its `cluster:`
// section describes, as the coordinator; ends like `troupe run`.
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "deploy/cluster/cluster_token.hpp"
#include "deploy/cli/commands.hpp"
#include "deploy/cluster/coordinator.hpp"
#include "deploy/cli/interrupt.hpp"
#include "deploy/cli/run_graph.hpp"
#include "deploy/cli/run_tracing.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe::cli {

namespace {

constexpr const char* launch_help = R"(usage: troupe launch FILE [--set KEY.PATH=VALUE]... [--steps N] [--summary-json OUT.json]
                     [--timeout SECONDS] [--resume DIR | --restart] [--trace OUT.json | --no-trace] [--trace-buffer N]
                     [--dashboard [ADDR]]

Validates the graph file FILE, then runs it across the node processes its
`cluster:` section asks for: `cluster: {launcher: local, nodes: 2}` starts two
processes on this machine (`ssh` with `hosts:`, or `slurm` inside an
allocation). This process is the coordinator: it listens on cluster.address
(127.0.0.1 by default) and only accepts nodes that present the shared token
(cluster.token_file, else $TROUPE_TOKEN, else a fresh one made for this launch).
Stages are spread evenly over the nodes unless an actor names its `node:`.

options:
  --set KEY.PATH=VALUE   override one value before validation (repeatable; nodes get it too)
  --steps N              train for N steps (the same as --set train.steps=N)
  --summary-json FILE    write the run's summary there, as `troupe run` does
  --timeout SECONDS      fail if the run takes longer (default: no limit)
  --trace FILE           each node writes its Chrome trace to FILE with `.nodeI`
                         before the extension (default: the graph's trace.file)
  --no-trace             write no trace
  --trace-buffer N       spans kept per thread on each node
  --dashboard [ADDR]     serve one live dashboard of every node's actors from this
                         process, at ADDR (default 127.0.0.1:8080; :0 picks a free
                         port; the URL is printed); nodes stream their spans to it,
                         lanes say their node; works with --trace
  --resume DIR           continue from a checkpoint: DIR is a checkpoint.dir
                         (its 'latest' names the step) or one step-NNNNNN folder
  --restart              start over in a checkpoint.dir that holds an earlier
                         run's checkpoints, removing them (without it, or
                         --resume, such a run is refused)
  -h, --help             show this help

Output files (--summary-json, each node's trace) and the checkpoint folder are
checked before any node starts; the checkpoint folder is locked for the run.

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

} // namespace

int run_launch(std::span<char*> args) {
  run_args ra;
  std::string summary;
  bool help = false;
  std::vector<char*> rest(args.begin(), args.end());
  trace_cli_options trace;
  if (!take_trace_options(rest, trace, "launch"))
    return bad_input;
  bool restart = take_flag(rest, "--restart");
  args = rest;
  if (!parse_graph_args(args, "launch", ra.file, ra.sets,
                        {{"--steps", &ra.steps}, {"--summary-json", &summary}, {"--timeout", &ra.timeout},
                         {"--resume", &ra.resume}},
                        help))
    return bad_input;
  if (help) {
    fmt::print("{}", launch_help);
    return ok;
  }
  if (restart && !ra.resume.empty()) {
    fmt::print(stderr, "troupe launch: --restart starts over and --resume continues: give one of them\n");
    return bad_input;
  }
  cluster::coordinator_options o;
  auto loaded = load_run_graph("launch", ra, o.timeout);
  if (!loaded.graph)
    return loaded.exit_code;
  const auto& g = *loaded.graph;
  auto trace_file = !trace.file.empty() ? trace.file : trace.no_trace ? std::string{} : g.trace.file;
  std::vector<std::string> outputs{summary};
  for (int i = 0; !trace_file.empty() && i < g.cluster.nodes; ++i)
    outputs.push_back(node_trace_file(trace_file, i));  // the nodes write these (a shared file system)
  auto ckpt_lock = prepare_run("launch", g, outputs, restart);
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
  o.graph_file = ra.file;
  o.overrides = ra.sets;
  o.resume = ra.resume.empty() ? std::string{} : std::filesystem::absolute(ra.resume).string();
  o.troupe_exe = self_exe();
  o.trace_file = trace_file;
  o.trace_buffer = trace.buffer;
  auto tracing = run_tracing::start_coordinator(g, trace);
  if (!tracing) {
    fmt::print(stderr, "troupe launch: {}\n", error_message(tracing.error()));
    return runtime_failure;
  }
  o.dashboard = (*tracing)->dashboard();
  interrupt_guard stop_on_signal;
  o.interrupt = &interrupt_guard::signal();
  auto result = cluster::run_coordinator(g, o);
  auto trace_err = (*tracing)->finish();
  if (!trace_err.empty())
    fmt::print(stderr, "troupe launch: {}\n", trace_err);
  auto rc = report_run("launch", g, ra.file, result, summary);
  return rc == ok && !trace_err.empty() ? runtime_failure : rc;
}

} // namespace troupe::cli
