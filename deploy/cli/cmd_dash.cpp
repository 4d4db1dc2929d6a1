// `troupe dash TRACE.json [--address ADDR]`: serves the dashboard page on a
// finished trace until interrupted.
#include <csignal>
#include <string_view>

#include <fmt/format.h>

#include "deploy/cli/commands.hpp"
#include "runtime/trace/dashboard_server.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe::cli {

namespace {

constexpr const char* dash_help = R"(usage: troupe dash TRACE.json [--address ADDR]

Serves the dashboard (the page `troupe run --dashboard` serves live) on a
finished trace written by `troupe run --trace`, until Ctrl-C.

options:
  --address ADDR   where to listen (default 127.0.0.1:8080; :0 picks a free port);
                   other interfaces only when named (0.0.0.0 for all)
  -h, --help       show this help

Exit codes: 0 stopped by a signal, 1 cannot read the trace or listen, 2 bad arguments.
)";

} // namespace

int dash_command(std::span<char*> args) {
  std::string file, address = "127.0.0.1:8080";
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "-h" || a == "--help") {
      fmt::print("{}", dash_help);
      return ok;
    }
    if (a == "--address" && i + 1 < args.size())
      address = args[++i];
    else if (a.starts_with("--address="))
      address = std::string{a.substr(10)};
    else if (!a.starts_with("-") && file.empty())
      file = a;
    else {
      fmt::print(stderr, "troupe dash: unexpected argument '{}'\n{}", a, dash_help);
      return bad_input;
    }
  }
  if (file.empty()) {
    fmt::print(stderr, "troupe dash: missing the trace file\n{}", dash_help);
    return bad_input;
  }
  auto t = read_chrome_trace(file);
  if (!t) {
    fmt::print(stderr, "troupe dash: {}\n", error_message(t.error()));
    return runtime_failure;
  }
  // Block the signals before the server thread starts, so only sigwait sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  dashboard_options opts;
  opts.address = address;
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

} // namespace troupe::cli
