// `troupe dash TRACE.json [--dashboard ADDR]`: serves the dashboard page on a
// finished trace until interrupted.
#include <csignal>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "runtime/trace/dashboard_server.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe::cli {

namespace {

constexpr const char* dash_description = R"(Serves the dashboard (the page `troupe run --dashboard` serves live) on a
finished trace written by `troupe run --trace`, until Ctrl-C.)";

constexpr const char* dash_footer =
  "Exit codes: 0 stopped by a signal, 1 cannot read the trace or listen, 2 bad arguments or not a trace.\n";

/// What `troupe dash`'s command line asked for.
struct dash_cli {
  std::string file;
  bool dashboard = true; // what --dashboard sets: dash always serves
  std::string address = "127.0.0.1:8080";
};

int dash(const dash_cli& a) {
  const auto& file = a.file;
  auto t = read_chrome_trace(file);
  if (!t) {
    fmt::print(stderr, "troupe dash: {}\n", error_message(t.error()));
    return is_error(t.error(), errc::io_failed) ? runtime_failure : bad_input; // not a trace: bad input
  }
  // Block the signals before the server thread starts, so only sigwait sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  dashboard_options opts;
  opts.address = a.address;
  opts.static_dir = default_dashboard_dir();
  opts.title = file;
  auto spans = t->spans.size();
  if (t->cut_short)
    fmt::print(stderr, "troupe dash: {} ends mid-event (its run was killed): showing it up to its last whole event\n",
               file);
  auto srv = dashboard_server::start_snapshot(std::move(*t), std::move(opts));
  if (!srv) {
    fmt::print(stderr, "troupe dash: {}\n", error_message(srv.error()));
    return runtime_failure;
  }
  fmt::print("dashboard for {} ({} spans): {}  (Ctrl-C stops)\n", file, spans, (*srv)->url());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  (*srv)->stop();
  return ok;
}

} // namespace

command_action define_dash(CLI::App& app) {
  auto a = std::make_shared<dash_cli>();
  describe(app, dash_description, dash_footer);
  app.add_option("TRACE", a->file, "a trace file (Chrome Trace Event JSON)")->required();
  add_dashboard(app, a->dashboard, a->address, "--address"); // its older name here
  return [a] { return dash(*a); };
}

} // namespace troupe::cli
