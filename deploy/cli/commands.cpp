// The subcommand table and top-level help of the troupe command.
#include "deploy/cli/commands.hpp"
#include "deploy/cli/model_size.hpp"
#include "deploy/cli/run_graph.hpp"

#include <array>
#include <charconv>
#include <filesystem>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"
#include "runtime/graph/output_path.hpp"

namespace troupe::cli {

namespace {

int print_version(std::span<char*>) {
  fmt::print("troupe 0.1.0\n");
  return ok;
}

// Subcommands, one line each. Keep this table the only list.
constexpr auto table = std::to_array<command>({
  {"check", "validate a graph file and print it expanded", run_check},
  {"run", "run a graph file's actors in this process", run_run},
  {"launch", "run a graph file across the processes of its cluster: section", run_launch},
  {"node", "one node of a launched run (started by launchers)", run_node},
  {"version", "print the version", print_version},
  {"schedule", "simulate a pipeline schedule: per-rank orders, bubble fraction, stragglers", schedule_command},
  {"sim", "simulate a graph at any size under a cost model: iteration time, TFLOP/s, MFU, memory", sim_command},
  {"trace", "summarize a trace: busy, idle and bubble per actor, action order per stage", trace_command},
  {"dash", "serve the dashboard on a finished trace", dash_command},
});

void print_help(std::FILE* out) {
  fmt::print(out, "usage: troupe COMMAND [ARGS...]\n\n"
                  "troupe runs YAML-described actor graphs for training models.\n\ncommands:\n");
  for (const auto& c : table)
    fmt::print(out, "  {:<10} {}\n", c.name, c.summary);
  fmt::print(out, "\n`troupe COMMAND --help` explains a command's options.\n"
                  "Exit codes: 0 success, 1 runtime failure, 2 bad input.\n");
}

} // namespace

bool parse_count(const char* cmd, std::string_view text, const char* opt, std::int64_t low, std::int64_t high,
                 std::int64_t& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  if (ec == std::errc{} && end == text.data() + text.size() && out >= low && out <= high)
    return true;
  fmt::print(stderr, "troupe {}: {} must be an integer from {} to {}, got '{}'\n", cmd, opt, low, high, text);
  return false;
}

std::span<const command> commands() {
  return table;
}

bool outputs_writable(std::string_view cmd, std::initializer_list<std::string_view> paths) {
  bool good = true;
  for (auto p : paths)
    if (!p.empty())
      if (auto err = check_output_path(std::filesystem::path{p})) {
        fmt::print(stderr, "troupe {}: {}\n", cmd, error_message(err));
        good = false;
      }
  return good;
}

std::optional<checkpoint_dir_lock> prepare_run(std::string_view cmd, const graph_spec& g,
                                               const std::vector<std::string>& outputs, bool restart) {
  bool good = true;
  for (const auto& out : outputs)
    good &= outputs_writable(cmd, {out});
  if (!good)
    return std::nullopt;
  auto lock = open_checkpoint_dir(g, restart);
  if (!lock) {
    fmt::print(stderr, "troupe {}: {}\n", cmd, error_message(lock.error()));
    return std::nullopt;
  }
  if (auto p = count_parameters(g); p.total > 0) // once every check has passed: stdout stays empty on a refusal
    fmt::print("{}\n", to_string(p));
  return std::move(*lock);
}

bool take_flag(std::vector<char*>& args, std::string_view flag) {
  auto n = std::erase_if(args, [&](const char* a) { return flag == a; });
  return n > 0;
}

int dispatch(int argc, char** argv) {
  if (argc < 2) {
    print_help(stderr);
    return bad_input;
  }
  std::string_view name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_help(stdout);
    return ok;
  }
  for (const auto& c : table)
    if (c.name == name)
      return c.run(std::span<char*>(argv + 2, static_cast<std::size_t>(argc - 2)));
  std::string known;
  for (const auto& c : table)
    known += (known.empty() ? "" : ", ") + std::string{c.name};
  fmt::print(stderr, "troupe: unknown command '{}' (known: {})\n", name, known);
  return bad_input;
}

} // namespace troupe::cli
