// How `troupe run` and `troupe launch` begin and end: their shared options,
// the graph loaded and resumed; one summary line, the summary JSON, the exit code.
#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "deploy/cli/commands.hpp"
#include "deploy/cli/interrupt.hpp"
#include "deploy/cli/run_graph.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe::cli {

std::optional<graph_spec> load_run_graph(const char* cmd, run_args& a, std::chrono::milliseconds& timeout) {
  if (a.timeout_s > 0)
    timeout = std::chrono::seconds(a.timeout_s);
  auto res = load_graph_for_cli(a.graph.file, a.graph.overrides());
  if (!res.ok()) {
    fmt::print(stderr, "{}", to_string(res.errors));
    return std::nullopt;
  }
  auto& g = *res.graph;
  if (!a.resume.empty()) {
    auto from = open_resume(a.resume, g);
    if (!from) {
      fmt::print(stderr, "troupe {}: cannot resume: {}\n", cmd, error_message(from.error()));
      return std::nullopt;
    }
    g.checkpoint.resume_folder = from->folder;
    g.checkpoint.resume_step = from->step;
    a.resume = from->folder.string();  // exactly this step, whatever `latest` says later
    fmt::print("resuming from {} after step {}\n", a.resume, from->step);
  }
  return std::move(res.graph);
}

int report_run(const char* cmd, const graph_spec& g, const std::string& file, const caf::expected<run_result>& result,
               const std::string& summary_path) {
  if (!result) {
    fmt::print(stderr, "troupe {}: {}\n", cmd, error_message(result.error()));
    if (is_error(result.error(), errc::interrupted))
      return interrupted_exit_code(interrupt_guard::signal().load());
    return runtime_failure;
  }
  auto fmt_opt = [](std::optional<double> v, const char* spec) {
    return v ? fmt::format(fmt::runtime(spec), *v) : std::string{"-"};
  };
  fmt::print("{}: {} steps in {:.2f} s, {} ms/step, {} tokens/s, train loss {}, val loss {}\n", file,
             result->steps, result->seconds, fmt_opt(result->ms_per_step(), "{:.2f}"),
             fmt_opt(result->tokens_per_s(), "{:.0f}"), fmt_opt(result->train_loss, "{:.4f}"),
             fmt_opt(result->val_loss, "{:.4f}"));
  std::fflush(stdout);
  if (!summary_path.empty()) {
    std::ofstream out{summary_path};
    out << summary_json(*result, count_parameters(g)).dump() << "\n";
    if (!out) {
      fmt::print(stderr, "troupe {}: cannot write the summary to '{}'\n", cmd, summary_path);
      return runtime_failure;
    }
  }
  return ok;
}

} // namespace troupe::cli
