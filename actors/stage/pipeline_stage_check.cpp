// What is checked of pipeline_stage entries before anything runs: a `table`
// schedule is read and run to completion under the simulated clock on the
// graph's own pipeline, and each stage's part of a checkpoint being resumed
// must hold the tensors, shapes and dtypes the stage restores.
#include <algorithm>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "actors/stage/stage_engine.hpp"
#include "ops/adamw.hpp"
#include "ops/gpt.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "runtime/graph/limits.hpp"
#include "runtime/transport/transport.hpp"
#include "schedulers/sim/harness.hpp"
#include "schedulers/policies/schedule_table.hpp"

namespace troupe {

namespace {

/// Why the graph's schedule table cannot run its pipeline of `ranks` stages
/// of `chunks` model chunks each, or nullopt. The messages start with the
/// table's name as written (the graph names the key).
std::optional<std::string> table_problem(const graph_spec& g, int ranks, int chunks) {
  const auto& p = g.pipeline;
  const auto& name = p.table;
  auto table = sched::load_table(p.table_path.string(), name);
  if (!table)
    return table.error().message;
  if (table->empty())
    return fmt::format("{}: holds no rank lines (one line of actions per stage, such as 0F0 0F1 0B0 0B1)", name);
  if (static_cast<int>(table->size()) != ranks)
    return fmt::format("{}: {} rank line{} for a pipeline of {} stages (one line per stage, in rank order)", name,
                       table->size(), table->size() == 1 ? "" : "s", ranks);
  int m = 0;
  for (const auto& row : *table)
    for (const auto& a : row)
      m = std::max(m, a.microbatch + 1);
  if (m != p.microbatches)
    return fmt::format("{}: runs microbatches 0 to {} but pipeline.microbatches is {} (a table lists one step)", name,
                       m - 1, p.microbatches);
  // The harness's cost grows with stages² × chunks × microbatches, as for `troupe schedule`.
  auto size = std::int64_t{ranks} * ranks * chunks * m;
  if (size > limits::max_schedule_size)
    return fmt::format("{}: too large to run under the simulated clock (stages² × chunks × microbatches is {}, "
                       "the limit {})",
                       name, size, limits::max_schedule_size);
  if (auto ok = sched::validate_table(*table, ranks, m, chunks); !ok)
    return fmt::format("{}: {}", name, ok.error().message);
  // The stages' own scheduling cores, router and credits, as the run will drive them.
  sched::sim_config c;
  c.ranks = ranks, c.microbatches = m, c.chunks = chunks;
  sched::policy_params base;
  base.table = std::move(*table);
  if (auto run = sched::simulate(c, "table", base); !run)
    return fmt::format("{}: does not run to completion under the simulated clock: {}", name, run.error().message);
  return std::nullopt;
}

/// Where a key's value of actor `a` was written (the actor's own place when unknown).
source_pos value_pos(const actor_spec& a, const YAML::Node& value) {
  source_pos at = a.pos;
  if (!value.Mark().is_null())
    at.line = value.Mark().line + 1, at.col = value.Mark().column + 1;
  return at;
}

} // namespace

caf::expected<std::pair<std::int64_t, double>> parse_stall(const YAML::Node& n) {
  auto bad = [&](const std::string& why) {
    return make_error(errc::invalid_argument,
                      fmt::format("expected {{step: N, for: DURATION}} (stuck once: a stage's first action of "
                                  "1-based step N, or a sync actor's first stage values from step N on, sleeps that "
                                  "long), {}",
                                  why));
  };
  if (!n.IsMap())
    return bad("got a scalar or a list");
  std::int64_t step = 0;
  double seconds = -1;
  for (auto it = n.begin(); it != n.end(); ++it) {
    auto key = it->first.IsScalar() ? it->first.Scalar() : std::string{};
    auto value = it->second.IsScalar() ? it->second.Scalar() : std::string{};
    if (key == "step") {
      if (!YAML::convert<std::int64_t>::decode(it->second, step) || step < 1)
        return bad(fmt::format("got step '{}'", value));
    } else if (key == "for") {
      auto d = net::parse_duration(value);
      if (!d || *d <= 0)
        return bad(d ? fmt::format("got for '{}' (more than zero)", value) : error_message(d.error()));
      seconds = *d;
    } else {
      return bad(fmt::format("got the key '{}'", key));
    }
  }
  if (step < 1 || seconds <= 0)
    return bad(step < 1 ? "step is missing" : "for is missing");
  return std::pair{step - 1, seconds};
}

void check_stall(const actor_spec& a, diagnostics& out) {
  if (auto s = a.params.find("stall"); s != a.params.end())
    if (auto stall = parse_stall(s->second); !stall)
      out.push_back({value_pos(a, s->second), fmt::format("{}.stall", a.name), error_message(stall.error())});
}

void check_pipeline_stage(const actor_spec& a, const graph_spec& g, diagnostics& out) {
  check_stall(a, out);
  if (auto s = a.params.find("slowdown"); s != a.params.end()) {
    double v = 0;
    bool number = s->second.IsScalar() && YAML::convert<double>::decode(s->second, v);
    if (!number || !(v >= 1.0 && v <= 1000.0)) {
      out.push_back({value_pos(a, s->second), fmt::format("{}.slowdown", a.name),
                     fmt::format("expected a factor from 1 to 1000 (an emulated slow device: each action takes "
                                 "this many times its compute), got '{}'",
                                 s->second.IsScalar() ? s->second.Scalar() : std::string{"a collection"})});
    }
  }
  // SkipPipe's stage 0 holds the head as a chunk of no blocks, which the CUDA model does not take (#14).
  if (g.skip_runs() && a.device.starts_with("cuda"))
    out.push_back(
      {g.skip.pos, "skip",
       fmt::format("SkipPipe runs CPU stages for now: '{}' runs on {} (set pipeline.device: cpu)", a.name, a.device)});
  // The schedule is the pipeline's, not one stage's: its first stage checks it, once for all.
  if (a.rank != 0 || a.replica != 0)
    return;
  // A policy that runs only on its replica's chain refuses routes across replicas
  // when the stage is made; say so here, at the key (what run refuses, check refuses).
  bool least = g.data_parallel.route == "least_loaded";
  std::string route_key = least ? "data_parallel.route" : "local_update.route";
  std::string router = least ? "least_loaded" : g.local_update.algorithm;
  if (g.routes_across_replicas() && g.pipeline.schedule == "table")
    out.push_back({g.where("pipeline.schedule"), "pipeline.schedule",
                   fmt::format("a table replays a fixed order of each rank's microbatches, while {}'s routes ({}) "
                               "bring a rank other replicas' microbatches in an order no file can know before the "
                               "run (use a rule policy such as 1f1b or interleaved_1f1b)",
                               router, route_key)});
  if (g.routes_across_replicas() && g.pipeline.schedule != "table") {
    sched::policy_params p;
    p.ranks = g.pipeline.stages, p.chunks = static_cast<int>(a.layers.size()), p.options = g.pipeline.policy;
    if (sched::make_policy(g.pipeline.schedule, p)) { // an unknown or misconfigured policy is reported elsewhere
      p.routed = true;
      if (auto routed = sched::make_policy(g.pipeline.schedule, p); !routed)
        out.push_back({g.where(route_key), route_key,
                       fmt::format("{} routes microbatches across replicas, which pipeline.schedule '{}' cannot "
                                   "run: {}",
                                   router, g.pipeline.schedule, routed.error().message)});
    }
  }
  // An F&B action is one task of two passes, which attention servers cannot split
  // at each layer's core attention (the engine refuses it; check says so first).
  if (g.attention.present && g.pipeline.schedule != "table") {
    sched::policy_params p;
    p.ranks = g.pipeline.stages, p.chunks = static_cast<int>(a.layers.size()), p.options = g.pipeline.policy;
    p.microbatches = g.pipeline.microbatches;
    if (auto policy = sched::make_policy(g.pipeline.schedule, p); policy && (*policy)->fuses_forward_backward())
      out.push_back({g.attention.pos, "attention",
                     fmt::format("pipeline.schedule '{}' fuses forwards with backwards (F&B), which attention "
                                 "servers do not run in pieces; choose another schedule",
                                 g.pipeline.schedule)});
  }
  // With replicas every replica replays the same per-rank lists over its own chain.
  if (g.pipeline.schedule != "table" || g.pipeline.table_path.empty())
    return;
  auto ranks = static_cast<int>(std::count_if(g.actors.begin(), g.actors.end(), [&](const actor_spec& s) {
    return s.role.holds_layers && s.replica == a.replica;
  }));
  if (auto why = table_problem(g, ranks, static_cast<int>(a.layers.size())))
    out.push_back({g.where("pipeline.table"), "pipeline.table", *why});
}

std::optional<std::string> check_stage_checkpoint(const graph_spec& g, const actor_spec& a,
                                                  const safetensors_header& part) {
  // What the stage's models hold (f32 weights on every device), chunk by chunk.
  std::vector<std::vector<param_info>> layouts;
  for (auto& specs : stage_param_specs(g, a)) {
    auto& chunk = layouts.emplace_back();
    for (auto& p : specs)
      chunk.push_back({std::move(p.name), p.shape, dtype::f32});
  }
  return check_stage_part(part, layouts, ops::adamw::kinds());
}

} // namespace troupe
