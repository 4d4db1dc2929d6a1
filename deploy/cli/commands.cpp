// The subcommand table, the top-level help and `troupe --version`, and the
// one CLI11 parse of every troupe command line.
#include "deploy/cli/commands.hpp"
#include "deploy/run/model_size.hpp"
#include "deploy/run/run_graph.hpp"

#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "deploy/cli/flags.hpp"
#include "kernels/cpu/target.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/graph/output_path.hpp"

namespace troupe::cli {

namespace {

constexpr const char* version = "troupe 0.1.0";

command_action define_version(CLI::App&) {
  return [] {
    fmt::print("{}\n", version);
    return static_cast<int>(ok);
  };
}

/// `troupe help [COMMAND [SUBCOMMAND]]`: the text `troupe COMMAND --help` prints.
command_action define_help(CLI::App& app) {
  auto names = std::make_shared<std::vector<std::string>>();
  app.add_option("COMMAND", *names, "the command to explain (all commands when left out)");
  return [&app, names] {
    const CLI::App* at = app.get_parent();
    std::string path = "troupe";
    for (const auto& n : *names) {
      const CLI::App* sub = nullptr;
      std::string known;
      for (const auto* c : at->get_subcommands([](const CLI::App*) { return true; })) {
        known += (known.empty() ? "" : ", ") + c->get_name();
        if (c->get_name() == n)
          sub = c;
      }
      if (!sub) {
        fmt::print(stderr, "troupe help: unknown command '{}' (known: {})\n", n, known);
        return static_cast<int>(bad_input);
      }
      at = sub;
      path += " " + n;
    }
    fmt::print("{}", at->get_formatter()->make_help(at, path, CLI::AppFormatMode::Normal));
    return static_cast<int>(ok);
  };
}

// Subcommands, one line each. Keep this table the only list.
constexpr auto table = std::to_array<command>({
  {"check", "validate a graph file and print it expanded", define_check},
  {"run", "run a graph file's actors in this process", define_run},
  {"launch", "run a graph file across the processes of its cluster: section", define_launch},
  {"node", "one node of a launched run (started by launchers)", define_node},
  {"schedule", "simulate a pipeline schedule: per-rank orders, bubble fraction, stragglers", define_schedule},
  {"sync", "run a local-update sync policy on a toy model: each replica's weights per step", define_sync},
  {"sim", "simulate a graph at any size under a cost model: iteration time, TFLOP/s, MFU, memory", define_sim},
  {"plan", "plan SkipPipe paths over a graph's network, or core attention across servers (DistCA)", define_plan},
  {"trace", "summarize a trace: busy, idle and bubble per actor, action order per stage", define_trace},
  {"dash", "serve the dashboard on a finished trace", define_dash},
  {"export", "write a checkpoint's weights as safetensors with Hugging Face's names", define_export},
  {"sample", "continue a prompt with a checkpoint's model", define_sample},
  {"version", "print the version (also troupe --version)", define_version},
  {"help", "explain a command (also troupe COMMAND --help)", define_help},
});

} // namespace

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

bool kernel_target_ok(std::string_view cmd) {
  if (auto err = kernels::cpu::kernel_target_from_env()) {
    fmt::print(stderr, "troupe {}: {}\n", cmd, error_message(err));
    return false;
  }
  return true;
}

namespace {

/// Whether no two of `outputs` name one file and none lies in the checkpoint
/// folder (the run's own: locked, and emptied by --restart). A summary written
/// over the trace was silently the only file left.
bool outputs_distinct(std::string_view cmd, const graph_spec& g, const std::vector<std::string>& outputs) {
  namespace fs = std::filesystem;
  auto normal = [](const fs::path& p) {
    std::error_code ec;
    auto n = fs::weakly_canonical(fs::absolute(p), ec);
    return (ec ? fs::absolute(p) : n).lexically_normal();
  };
  std::vector<std::pair<fs::path, std::string>> seen;
  auto ckpt = g.checkpoint.every > 0 && !g.checkpoint.dir_path.empty() ? normal(g.checkpoint.dir_path) : fs::path{};
  bool good = true;
  for (const auto& out : outputs) {
    if (out.empty())
      continue;
    auto p = normal(out);
    for (const auto& [q, first] : seen)
      if (p == q) {
        fmt::print(stderr,
                   "troupe {}: '{}' and '{}' name one file: each output (the trace, --summary-json) needs "
                   "its own, or one overwrites the other\n",
                   cmd, first, out);
        good = false;
      }
    if (!ckpt.empty()) {
      auto rel = p.lexically_relative(ckpt);
      if (!rel.empty() && *rel.begin() != "..") {
        fmt::print(stderr,
                   "troupe {}: '{}' is in the checkpoint folder '{}', which the run keeps for its "
                   "checkpoints; write it elsewhere\n",
                   cmd, out, g.checkpoint.dir_path.string());
        good = false;
      }
    }
    seen.emplace_back(p, out);
  }
  return good;
}

} // namespace

std::optional<checkpoint_dir_lock> prepare_run(std::string_view cmd, const graph_spec& g,
                                               const std::vector<std::string>& outputs, bool restart) {
  if (!outputs_distinct(cmd, g, outputs))
    return std::nullopt;
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

int dispatch(int argc, char** argv) {
  CLI::App app{"troupe runs YAML-described actor graphs for training models.", "troupe"};
  use_house_help(app);
  app.footer("`troupe COMMAND --help` or `troupe help COMMAND` explains a command's options.\n"
             "Exit codes: 0 success, 1 runtime failure, 2 bad input.\n");
  bool show_version = false;
  app.add_flag("--version", show_version, "print the version");
  app.require_subcommand(0, 1);
  std::vector<std::pair<const CLI::App*, command_action>> actions;
  for (const auto& c : table) {
    auto& sub = add_command(app, std::string{c.name}, std::string{c.summary});
    actions.emplace_back(&sub, c.define(sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    fmt::print("{}", app.help());
    return ok;
  } catch (const CLI::ParseError& e) {
    print_usage_error(app, e);
    return bad_input;
  }
  if (show_version) {
    fmt::print("{}\n", version);
    return ok;
  }
  for (const auto& [sub, action] : actions)
    if (sub->parsed())
      return action();
  fmt::print(stderr, "{}", app.help());
  return bad_input;
}

} // namespace troupe::cli
