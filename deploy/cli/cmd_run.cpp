// `troupe run FILE [--set k=v]... [--steps N] [--summary-json OUT] [--resume DIR | --restart]`:
// run a graph in this process (or continue one from a checkpoint) and report
// steps, throughput and losses.
#include <charconv>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <fmt/format.h>

#include "deploy/cli/commands.hpp"
#include "deploy/cli/interrupt.hpp"
#include "deploy/cli/run_graph.hpp"
#include "deploy/cli/run_tracing.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/graph/limits.hpp"

namespace troupe::cli {

namespace {

constexpr const char* run_help = R"(usage: troupe run FILE [--set KEY.PATH=VALUE]... [--steps N] [--summary-json OUT.json]
                  [--resume DIR | --restart] [--threads N] [--timeout SECONDS] [--trace OUT.json]
                  [--dashboard [ADDR]]

Validates the graph file FILE (like troupe check), then spawns its actors in
this process, runs them and prints a summary.

options:
  --set KEY.PATH=VALUE   override one value before validation (repeatable)
  --steps N              train for N steps (the same as --set train.steps=N)
  --summary-json FILE    write {"steps", "tokens_per_s", "ms_per_step",
                         "train_loss", "val_loss", "first_step", "losses",
                         "parameters": {"total", "per_actor"}} there at the
                         end (null where a number does not apply)
  --resume DIR           continue from a checkpoint: DIR is a checkpoint.dir
                         (its 'latest' names the step) or one step-NNNNNN folder
  --restart              start over in a checkpoint.dir that holds an earlier
                         run's checkpoints, removing them (without it, or
                         --resume, such a run is refused)
  --threads N            actor-system worker threads (default: one per core,
                         or $TROUPE_THREADS)
  --timeout SECONDS      fail if the run takes longer (default: no limit)
)";

constexpr const char* run_help_tail = R"(  -h, --help             show this help

Ctrl-C (SIGINT) or SIGTERM stops every actor cleanly (the trace is written, the
last checkpoint named); a second Ctrl-C ends at once.

Output files (--trace, --summary-json) and the checkpoint folder are checked
before the run starts; the checkpoint folder is locked for the run (a second
run into it is refused, naming the first).

Exit codes: 0 success, 1 the run failed (or its trace could not be written),
2 invalid graph or arguments, an output that cannot be written, a checkpoint
folder in use; 130/143 stopped by SIGINT/SIGTERM.
)";

} // namespace

int run_run(std::span<char*> args) {
  run_args ra;
  std::string summary, threads;
  bool help = false;
  std::vector<char*> rest(args.begin(), args.end());
  trace_cli_options trace_opts;
  if (!take_trace_options(rest, trace_opts))
    return bad_input;
  bool restart = take_flag(rest, "--restart");
  args = rest;
  if (!parse_graph_args(args, "run", ra.file, ra.sets,
                        {{"--steps", &ra.steps}, {"--summary-json", &summary}, {"--threads", &threads},
                         {"--timeout", &ra.timeout}, {"--resume", &ra.resume}},
                        help))
    return bad_input;
  if (help) {
    fmt::print("{}{}{}", run_help, trace_options_help, run_help_tail);
    return ok;
  }
  if (restart && !ra.resume.empty()) {
    fmt::print(stderr, "troupe run: --restart starts over and --resume continues: give one of them\n");
    return bad_input;
  }
  auto opts = runtime_options_from_env();
  if (!threads.empty()) {
    std::int64_t n = 0;
    if (!parse_count("run", threads, "--threads", 1, limits::max_threads, n))
      return bad_input;
    opts.threads = static_cast<std::size_t>(n);
  }
  run_options ropts;
  auto loaded = load_run_graph("run", ra, ropts.timeout);
  if (!loaded.graph)
    return loaded.exit_code;
  const auto& g = *loaded.graph;
  auto trace_file = !trace_opts.file.empty() ? trace_opts.file : trace_opts.no_trace ? std::string{} : g.trace.file;
  auto ckpt_lock = prepare_run("run", g, {trace_file, summary}, restart);
  if (!ckpt_lock)
    return bad_input;
  troupe_config cfg{opts};
  caf::actor_system sys{cfg};
  auto tracing = run_tracing::start(g, trace_opts);
  if (!tracing) {
    fmt::print(stderr, "troupe run: {}\n", error_message(tracing.error()));
    return runtime_failure;
  }
  interrupt_guard stop_on_signal;
  ropts.interrupt = &interrupt_guard::signal();
  auto result = run_graph(sys, g, ropts);
  auto trace_err = (*tracing)->finish();
  if (!trace_err.empty())
    fmt::print(stderr, "troupe run: {}\n", trace_err);
  auto rc = report_run("run", g, ra.file, result, summary);
  return rc == ok && !trace_err.empty() ? runtime_failure : rc;  // a lost trace is a failed command
}

} // namespace troupe::cli
