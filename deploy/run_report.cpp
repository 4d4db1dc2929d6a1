// How `troupe run` and `troupe launch` end: one summary line, the optional
// summary JSON, and the exit code.
#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "deploy/commands.hpp"
#include "deploy/run_graph.hpp"
#include "runtime/errors.hpp"

namespace troupe::cli {

int report_run(const char* cmd, const std::string& file, const caf::expected<run_result>& result,
               const std::string& summary_path) {
  if (!result) {
    fmt::print(stderr, "troupe {}: {}\n", cmd, error_message(result.error()));
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
    out << summary_json(*result) << "\n";
    if (!out) {
      fmt::print(stderr, "troupe {}: cannot write the summary to '{}'\n", cmd, summary_path);
      return runtime_failure;
    }
  }
  return ok;
}

} // namespace troupe::cli
