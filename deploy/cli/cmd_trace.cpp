// `troupe trace summarize OUT.json`: per actor busy and idle time, each
// stage's bubble, and each stage's distinct action orders, from a trace file.
#include <map>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/trace/trace_summary.hpp"

namespace troupe::cli {

namespace {

constexpr const char* summarize_description =
  R"(Reads a trace written by `troupe run --trace` (Chrome Trace Event JSON) and
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
  bool json = false;
};

/// The summary as one JSON object: what the text says, for a script.
nlohmann::json summary_json(const trace_summary& s) {
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  std::map<std::uint16_t, std::string> names;
  nlohmann::json actors = nlohmann::json::array();
  for (const auto& a : s.actors) {
    names[a.actor.id] = a.actor.name;
    actors.push_back({{"name", a.actor.name},
                      {"type", a.actor.type},
                      {"node", a.actor.node},
                      {"busy_s", static_cast<double>(a.busy_ns) * 1e-9},
                      {"idle_s", static_cast<double>(a.idle_ns) * 1e-9},
                      {"busy_fraction", a.busy_fraction},
                      {"spans", a.spans},
                      {"mailbox_max", a.mailbox_max},
                      {"bytes_sent", a.bytes_sent}});
  }
  nlohmann::json orders = nlohmann::json::array();
  for (const auto& o : distinct_orders(s.orders))
    orders.push_back({{"actor", names[o.actor]}, {"rank", o.rank}, {"steps", o.steps}, {"actions", o.actions}});
  return {{"window_s", static_cast<double>(s.end_ns - s.begin_ns) * 1e-9},
          {"bubble_fraction", opt(s.bubble_fraction)},
          {"last_step", s.last_step},
          {"loss", opt(s.loss)},
          {"val_loss", opt(s.val_loss)},
          {"tokens_per_s", opt(s.tokens_per_s)},
          {"spans", s.span_count},
          {"cut_short", s.cut_short},
          {"actors", actors},
          {"stragglers", to_json(s.stragglers)},
          {"orders", orders}};
}

int summarize_trace(const summarize_cli& a) {
  const auto& file = a.file;
  bool orders = !a.no_order;
  auto t = read_chrome_trace(file);
  if (!t) {
    fmt::print(stderr, "troupe trace summarize: {}\n", error_message(t.error()));
    return is_error(t.error(), errc::io_failed) ? runtime_failure : bad_input;
  }
  auto summary = summarize(*t, -1, -1, orders);
  if (a.json)
    fmt::print("{}\n", summary_json(summary).dump(2));
  else
    fmt::print("{}", to_text(summary));
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
  sub->add_flag("--json", a->json, "print the summary as one JSON object (actors, bubble_fraction, orders, ...)");
  return [&app, sub, a] {
    if (sub->parsed())
      return summarize_trace(*a);
    fmt::print(stderr, "{}", app.help("troupe"));
    return static_cast<int>(bad_input);
  };
}

} // namespace troupe::cli
