// `troupe check FILE [--set k=v]... [--steps N]`: validate a graph and print it expanded.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/skippipe_plan.hpp"
#include "actors/zero_shard_state.hpp"
#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "deploy/cli/memory_estimate.hpp"
#include "deploy/run/model_size.hpp"
#include "deploy/run/run_graph.hpp"
#include "kernels/cpu/target.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/checkpoint/checkpoint.hpp"

namespace troupe::cli {

namespace {

constexpr const char* check_description =
  R"(Validates the graph file FILE and prints the expanded graph: the shorthand
sections (pipeline: ...) turned into explicit actors and channels, defaults
filled in. Plugins named in the file are loaded so their actor types count.)";

constexpr const char* check_footer = R"(The first line, a YAML comment, counts the model's parameters, in total and per
stage (from the config: nothing is built); the next names the CPU kernels' SIMD
target and OpenBLAS's core on this machine (TROUPE_CPU_TARGET caps the target).
With data_parallel: the bytes each stage and optimizer shard will hold for
parameters, gradients and optimizer state.
Every problem is reported at once as FILE:LINE:COL: KEY.PATH: MESSAGE.
By default it answers whether `troupe run` here takes the graph: what run would
refuse (a SkipPipe graph with more network nodes than stage actors, an estimate
past this machine's memory) is an error. `--for sim` or `--for plan` checks a
graph meant for `troupe sim` or `troupe plan paths`: those are warnings then.
Exit codes: 0 valid, 2 invalid (errors on stderr; with --json in the object on stdout) or a
TROUPE_CPU_TARGET this CPU does not run.
)";

/// `# memory (bytes): ACTOR params P grads G optimizer O` per stage and
/// optimizer shard, from the graph alone (actors/zero_shard_state.hpp).
std::string predicted_memory(const graph_spec& g) {
  std::string out = "# memory held (bytes, f32 training), from the graph:\n";
  auto line = [&](const std::string& who, const held_bytes& h) {
    out += fmt::format("#   {} params {} grads {} optimizer {}\n", who, h.params, h.grads, h.optimizer);
  };
  for (const auto& a : g.actors)
    if (a.role.holds_layers) {
      auto p = predict_held(g, a);
      line(a.name, p.stage);
      if (g.data_parallel.zero > 0 && g.data_parallel.replicas > 1)
        line(a.name + "_os", p.shard);
    }
  return out;
}

/// What `troupe run` refuses of a graph that plan and sim take: the SkipPipe
/// graph whose network has more nodes than a run has stage actors, and an
/// estimate past this machine's memory. Each one's position and words.
std::vector<diagnostic> run_refusals(const graph_spec& g, const std::string& file) {
  std::vector<diagnostic> out;
  if (auto d = skippipe_not_runnable(g))
    out.push_back(*d);
  if (auto why = memory_problem(g, machine_memory()))
    out.push_back({source_pos{file, 0, 0, {}}, "", *why});
  return out;
}

/// One problem as `troupe check --json` lists it.
nlohmann::json diagnostic_json(const diagnostic& d) {
  return {{"file", d.pos.file},     {"line", d.pos.line}, {"column", d.pos.col},
          {"origin", d.pos.origin}, {"path", d.path},     {"message", d.message}};
}

/// `troupe check --json`: the verdict as one object on stdout, valid or not:
/// {"valid", "errors": [{file, line, column, origin, path, message}], and when
/// valid "parameters", "memory" (with data_parallel) and "graph" (the expanded YAML)}.
int check_json(const graph_args& a, bool for_run) {
  auto res = load_graph_for_cli(a.file, a.overrides());
  nlohmann::json errors = nlohmann::json::array();
  for (const auto& d : res.errors)
    errors.push_back(diagnostic_json(d));
  if (res.ok() && !res.graph->train.init.empty())
    if (auto init = check_init(*res.graph); !init) {
      const auto& at = res.graph->train.init_pos;
      auto message = error_message(init.error());
      if (auto prefix = to_string(at) + ": train.init: "; message.starts_with(prefix))
        message.erase(0, prefix.size()); // the position has fields of its own here
      errors.push_back(diagnostic_json({at, "train.init", message}));
      res.graph.reset();
    }
  nlohmann::json warnings = nlohmann::json::array();
  if (res.ok())
    for (const auto& d : run_refusals(*res.graph, a.file)) {
      if (!for_run) {
        warnings.push_back(d.message);
        continue;
      }
      errors.push_back(diagnostic_json(d));
      res.graph.reset();
    }
  nlohmann::json out{{"valid", res.ok()},
                     {"errors", errors},
                     {"warnings", warnings},
                     {"kernel_target", kernels::cpu::kernel_target()},
                     {"blas_core", kernels::cpu::blas_core()}};
  if (res.ok()) {
    const auto& g = *res.graph;
    out["parameters"] = to_json(count_parameters(g));
    if (g.data_parallel.present) {
      nlohmann::json memory = nlohmann::json::object();
      auto held = [](const held_bytes& h) {
        return nlohmann::json{{"params", h.params}, {"grads", h.grads}, {"optimizer", h.optimizer}};
      };
      for (const auto& actor : g.actors)
        if (actor.role.holds_layers) {
          auto p = predict_held(g, actor);
          memory[actor.name] = held(p.stage);
          if (g.data_parallel.zero > 0 && g.data_parallel.replicas > 1)
            memory[actor.name + "_os"] = held(p.shard);
        }
      out["memory"] = memory;
    }
    out["graph"] = to_yaml(g);
  }
  fmt::print("{}\n", out.dump(2));
  return out["valid"] == true ? ok : bad_input;
}

int check(const graph_args& a, bool json, const std::string& purpose) {
  if (!kernel_target_ok("check"))
    return bad_input;
  const bool for_run = purpose == "run";
  if (json)
    return check_json(a, for_run);
  auto res = load_graph_for_cli(a.file, a.overrides());
  if (!res.ok()) {
    fmt::print(stderr, "{}", to_string(res.errors));
    return bad_input;
  }
  // What run refuses of a graph that plan and sim take: an error when checked for
  // run (run and launch refuse it, exit 2, before anything starts), else a warning.
  auto refusals = run_refusals(*res.graph, a.file);
  for (const auto& d : refusals)
    if (for_run)
      fmt::print(stderr, "{}: {}{}\n", to_string(d.pos), d.path.empty() ? "" : d.path + ": ", d.message);
    else
      fmt::print(stderr, "{}: warning: {}; `troupe run` refuses it here\n", to_string(d.pos), d.message);
  if (for_run && !refusals.empty()) {
    fmt::print(stderr, "(checked for `troupe run` on this machine; `--for sim` or `--for plan` checks the graph for "
                       "`troupe sim` or `troupe plan paths`)\n");
    return bad_input;
  }
  // A warm start's checkpoint as run checks it: there, and each stage's part matching (run refused it, check passed).
  if (!res.graph->train.init.empty())
    if (auto init = check_init(*res.graph); !init) {
      fmt::print(stderr, "{}\n", error_message(init.error()));
      return bad_input;
    }
  // A YAML comment, so the output still reads back as the graph.
  if (auto p = count_parameters(*res.graph); p.total > 0)
    fmt::print("# {}\n", to_string(p));
  fmt::print("# {}\n", kernels::cpu::kernel_summary()); // what `troupe run` here would compute with
  if (res.graph->data_parallel.present)
    fmt::print("{}", predicted_memory(*res.graph));
  fmt::print("{}", to_yaml(*res.graph));
  return ok;
}

} // namespace

command_action define_check(CLI::App& app) {
  auto a = std::make_shared<graph_args>();
  auto json = std::make_shared<bool>(false);
  auto purpose = std::make_shared<std::string>("run");
  describe(app, check_description, std::string{check_footer} + "\n" + paths_help);
  add_graph_args(app, *a);
  app.add_flag("--json", *json,
               "print the verdict as one JSON object on stdout: valid, errors (file, line, column,\n"
               "path, message), and for a valid graph parameters, memory and the expanded graph");
  app
    .add_option("--for", *purpose,
                "the command the graph is meant for: run (default: what `troupe run` here would refuse is an "
                "error), sim or plan (those are warnings)")
    ->option_text("run|sim|plan")
    ->check(CLI::IsMember({"run", "sim", "plan"}));
  return [a, json, purpose] { return check(*a, *json, *purpose); };
}

} // namespace troupe::cli
