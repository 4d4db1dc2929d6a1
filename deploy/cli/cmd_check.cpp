// `troupe check FILE [--set k=v]... [--steps N]`: validate a graph and print it expanded.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "actors/zero_shard_state.hpp"
#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "deploy/cli/model_size.hpp"
#include "deploy/cli/run_graph.hpp"
#include "kernels/cpu/target.hpp"

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
Exit codes: 0 valid, 2 invalid (errors on stderr) or a TROUPE_CPU_TARGET this
CPU does not run.
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

int check(const graph_args& a) {
  if (!kernel_target_ok("check"))
    return bad_input;
  auto res = load_graph_for_cli(a.file, a.overrides());
  if (!res.ok()) {
    fmt::print(stderr, "{}", to_string(res.errors));
    return bad_input;
  }
  // A YAML comment, so the output still reads back as the graph.
  if (auto p = count_parameters(*res.graph); p.total > 0)
    fmt::print("# {}\n", to_string(p));
  fmt::print("# {}\n", kernels::cpu::kernel_summary());  // what `troupe run` here would compute with
  if (res.graph->data_parallel.present)
    fmt::print("{}", predicted_memory(*res.graph));
  fmt::print("{}", to_yaml(*res.graph));
  return ok;
}

} // namespace

command_action define_check(CLI::App& app) {
  auto a = std::make_shared<graph_args>();
  describe(app, check_description, std::string{check_footer} + "\n" + paths_help);
  add_graph_args(app, *a);
  return [a] { return check(*a); };
}

} // namespace troupe::cli
