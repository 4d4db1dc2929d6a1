// `troupe run FILE [--set k=v]... [--steps N] [--summary-json OUT] [--resume DIR | --restart]`:
// run a graph in this process (or continue one from a checkpoint) and report
// steps, throughput and losses.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <fmt/format.h>

#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "deploy/cli/interrupt.hpp"
#include "deploy/cli/run_command.hpp"
#include "deploy/run/run_tracing.hpp"
#include "kernels/cpu/target.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/checkpoint/checkpoint.hpp"

namespace troupe::cli {

namespace {

constexpr const char* run_description = R"(Validates the graph file FILE (like troupe check), then spawns its actors in
this process, runs them and prints a summary. A line before the run names the
CPU kernels' SIMD target and OpenBLAS's core (the summary JSON records both as
kernel_target and blas_core); TROUPE_CPU_TARGET caps the target (avx2, sse4,
baseline, ...), a name this CPU does not run is refused.)";

constexpr const char* run_footer = R"(Ctrl-C (SIGINT) or SIGTERM stops every actor cleanly (the trace is written, the
last checkpoint named); a second Ctrl-C ends at once.

Output files (--trace, --summary-json) and the checkpoint folder are checked
before the run starts; the checkpoint folder is locked for the run (a second
run into it is refused, naming the first).

Exit codes: 0 success, 1 the run failed (or its trace could not be written),
2 invalid graph or arguments (or TROUPE_CPU_TARGET), an output that cannot be written, a checkpoint
folder in use; 130/143 stopped by SIGINT/SIGTERM.
)";

int run(run_args& ra) {
  if (!kernel_target_ok("run"))
    return bad_input;
  auto opts = runtime_options_from_env();
  if (ra.threads > 0)
    opts.threads = static_cast<std::size_t>(ra.threads);
  run_options ropts;
  auto loaded = load_run_graph("run", ra, ropts.timeout);
  if (!loaded.graph)
    return loaded.exit_code;
  const auto& g = *loaded.graph;
  auto ckpt_lock = prepare_run("run", g, {trace_file(g, ra.trace), ra.summary}, ra.restart);
  if (!ckpt_lock)
    return bad_input;
  fmt::print("{}\n", kernels::cpu::kernel_summary()); // a slow run explains itself
  troupe_config cfg{opts};
  caf::actor_system sys{cfg};
  auto tracing = run_tracing::start(g, ra.trace);
  if (!tracing) {
    fmt::print(stderr, "troupe run: {}\n", error_message(tracing.error()));
    return runtime_failure;
  }
  interrupt_guard stop_on_signal;
  ropts.interrupt = &interrupt_guard::signal();
  auto result = run_graph(sys, g, ropts);
  auto trace_err = (*tracing)->finish();
  if (trace_err)
    fmt::print(stderr, "troupe run: {}\n", error_message(trace_err));
  auto rc = report_run("run", g, ra.graph.file, result, ra.summary);
  return rc == ok && trace_err ? runtime_failure : rc; // a lost trace is a failed command
}

} // namespace

command_action define_run(CLI::App& app) {
  auto a = std::make_shared<run_args>();
  describe(app, run_description, std::string{run_footer} + "\n" + paths_help);
  add_run_args(app, *a);
  return [a] { return run(*a); };
}

} // namespace troupe::cli
