// `troupe trace summarize OUT.json`: per actor busy and idle time, each
// stage's bubble, and each stage's distinct action orders, from a trace file.
#include <string_view>

#include <fmt/format.h>

#include "deploy/cli/commands.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/trace/trace_summary.hpp"

namespace troupe::cli {

namespace {

constexpr const char* trace_help = R"(usage: troupe trace summarize TRACE.json [--no-order]

Reads a trace written by `troupe run --trace` (Chrome Trace Event JSON) and
prints, per actor, busy and idle time over the span from the first to the
last compute span, a pipeline stage's bubble (its idle share) and the deepest
mailbox; the pipeline's bubble fraction; the channels seen; and each stage's
action order as text (`0F0 0F1 0B0 ...`), each distinct order once with the
steps that ran it, to compare with `troupe schedule`. A file cut short by a
killed run is read up to its last whole event.

options:
  --no-order    leave out the action orders
  -h, --help    show this help

Exit codes: 0 success, 1 the file cannot be read, 2 bad arguments or not a trace.
)";

} // namespace

int trace_command(std::span<char*> args) {
  if (args.empty() || std::string_view{args[0]} == "-h" || std::string_view{args[0]} == "--help") {
    fmt::print(args.empty() ? stderr : stdout, "{}", trace_help);
    return args.empty() ? bad_input : ok;
  }
  if (std::string_view{args[0]} != "summarize") {
    fmt::print(stderr, "troupe trace: unknown subcommand '{}' (known: summarize)\n", args[0]);
    return bad_input;
  }
  std::string file;
  bool orders = true;
  for (std::size_t i = 1; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "-h" || a == "--help") {
      fmt::print("{}", trace_help);
      return ok;
    }
    if (a == "--no-order")
      orders = false;
    else if (!a.starts_with("-") && file.empty())
      file = a;
    else {
      fmt::print(stderr, "troupe trace summarize: unexpected argument '{}'\n", a);
      return bad_input;
    }
  }
  if (file.empty()) {
    fmt::print(stderr, "troupe trace summarize: missing the trace file\n");
    return bad_input;
  }
  auto t = read_chrome_trace(file);
  if (!t) {
    fmt::print(stderr, "troupe trace summarize: {}\n", error_message(t.error()));
    return is_error(t.error(), errc::io_failed) ? runtime_failure : bad_input;
  }
  fmt::print("{}", to_text(summarize(*t, -1, -1, orders)));
  return ok;
}

} // namespace troupe::cli
