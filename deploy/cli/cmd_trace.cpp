// `troupe trace summarize OUT.json`: per actor busy and idle time, each
// stage's bubble, and each stage's distinct action orders, from a trace file.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/trace/trace_summary.hpp"

namespace troupe::cli {

namespace {

constexpr const char* summarize_description = R"(Reads a trace written by `troupe run --trace` (Chrome Trace Event JSON) and
prints, per actor, busy and idle time over the span from the first to the
last compute span, a pipeline stage's bubble (its idle share) and the deepest
mailbox; the pipeline's bubble fraction; the channels seen; and each stage's
action order as text (`0F0 0F1 0B0 ...`), each distinct order once with the
steps that ran it, to compare with `troupe schedule`. A file cut short by a
killed run is read up to its last whole event.)";

constexpr const char* trace_footer =
  "Exit codes: 0 success, 1 the file cannot be read, 2 bad arguments or not a trace.\n";

/// What `troupe trace summarize`'s command line asked for.
struct summarize_cli {
  std::string file;
  bool no_order = false;
};

int summarize_trace(const summarize_cli& a) {
  const auto& file = a.file;
  bool orders = !a.no_order;
  auto t = read_chrome_trace(file);
  if (!t) {
    fmt::print(stderr, "troupe trace summarize: {}\n", error_message(t.error()));
    return is_error(t.error(), errc::io_failed) ? runtime_failure : bad_input;
  }
  fmt::print("{}", to_text(summarize(*t, -1, -1, orders)));
  return ok;
}

} // namespace

command_action define_trace(CLI::App& app) {
  auto a = std::make_shared<summarize_cli>();
  describe(app, "Reads traces written by `troupe run --trace`.", trace_footer);
  auto* sub = &add_command(app, "summarize", "busy, idle and bubble per actor, action order per stage");
  describe(*sub, summarize_description, trace_footer);
  sub->add_option("TRACE", a->file, "a trace file (Chrome Trace Event JSON)")->required();
  sub->add_flag("--no-order", a->no_order, "leave out the per-step action orders");
  return [&app, sub, a] {
    if (sub->parsed())
      return summarize_trace(*a);
    fmt::print(stderr, "{}", app.help("troupe"));
    return static_cast<int>(bad_input);
  };
}

} // namespace troupe::cli
