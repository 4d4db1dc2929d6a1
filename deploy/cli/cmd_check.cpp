// `troupe check FILE [--set k=v]...`: validate a graph and print it expanded.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "deploy/cli/commands.hpp"
#include "deploy/cli/model_size.hpp"
#include "deploy/cli/run_graph.hpp"

namespace troupe::cli {

namespace {

constexpr const char* check_help = R"(usage: troupe check FILE [--set KEY.PATH=VALUE]...

Validates the graph file FILE and prints the expanded graph: the shorthand
sections (pipeline: ...) turned into explicit actors and channels, defaults
filled in. Plugins named in the file are loaded so their actor types count.

options:
  --set KEY.PATH=VALUE  override one value before validation, checked exactly
                        like the file (e.g. --set pipeline.stages=2,
                        --set model.precision=bf16, --set actors[1].layers=[0,3]);
                        repeat for several
  -h, --help            show this help

The first line, a YAML comment, counts the model's parameters, in total and per
stage (from the config: nothing is built).
Every problem is reported at once as FILE:LINE:COL: KEY.PATH: MESSAGE.
Exit codes: 0 valid, 2 invalid (errors on stderr).
)";

} // namespace

/// Parses `FILE [--set k=v]...` plus the options in `extra` (name -> value slot).
bool parse_graph_args(std::span<char*> args, const char* cmd, std::string& file, std::vector<std::string>& sets,
                      const std::vector<std::pair<std::string, std::string*>>& extra, bool& help) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    auto value_of = [&](const std::string& opt, std::string& out) {
      if (a.starts_with(opt + "=")) {
        out = a.substr(opt.size() + 1);
        return true;
      }
      if (a == opt) {
        if (i + 1 >= args.size()) {
          fmt::print(stderr, "troupe {}: {} needs a value\n", cmd, opt);
          return false;
        }
        out = args[++i];
        return true;
      }
      return false;
    };
    if (a == "-h" || a == "--help") {
      help = true;
      return true;
    }
    std::string v;
    if (a == "--set" || a.starts_with("--set=")) {
      if (!value_of("--set", v))
        return false;
      sets.push_back(v);
      continue;
    }
    bool matched = false;
    for (const auto& [opt, slot] : extra)
      if (a == opt || a.starts_with(opt + "=")) {
        if (!value_of(opt, *slot))
          return false;
        matched = true;
      }
    if (matched)
      continue;
    if (a.starts_with("-")) {
      fmt::print(stderr, "troupe {}: unknown option '{}' (see troupe {} --help)\n", cmd, a, cmd);
      return false;
    }
    if (!file.empty()) {
      fmt::print(stderr, "troupe {}: one graph file only (got '{}' and '{}')\n", cmd, file, a);
      return false;
    }
    file = a;
  }
  if (file.empty()) {
    fmt::print(stderr, "troupe {}: missing graph FILE (see troupe {} --help)\n", cmd, cmd);
    return false;
  }
  return true;
}

int run_check(std::span<char*> args) {
  std::string file;
  std::vector<std::string> sets;
  bool help = false;
  if (!parse_graph_args(args, "check", file, sets, {}, help))
    return bad_input;
  if (help) {
    fmt::print("{}", check_help);
    return ok;
  }
  auto res = load_graph_for_cli(file, sets);
  if (!res.ok()) {
    fmt::print(stderr, "{}", to_string(res.errors));
    return bad_input;
  }
  // A YAML comment, so the output still reads back as the graph.
  if (auto p = count_parameters(*res.graph); p.total > 0)
    fmt::print("# {}\n", to_string(p));
  fmt::print("{}", to_yaml(*res.graph));
  return ok;
}

} // namespace troupe::cli
