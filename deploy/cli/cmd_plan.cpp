// `troupe plan paths FILE`: SkipPipe's plan for a graph file's `network:` and
// `skip:` sections (schedulers/planners/skippipe_planner.hpp): the placement of network
// nodes on stage positions, each microbatch's path, and the iteration time under
// the cost model against the full pipeline and random skipping. `troupe plan
// attention` lives in deploy/cli/cmd_plan_attention.cpp.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/builtin.hpp"
#include "actors/skippipe_plan.hpp"
#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "deploy/run/run_graph.hpp"

namespace troupe::cli {

namespace {

using namespace troupe::sched;

void print_text(const std::string& file, const graph_spec& g, const skippipe_plan& rep) {
  const auto& net = g.network;
  const int n = net.nodes();
  fmt::print("troupe plan paths: {}: {} network nodes on {} stage positions, {} microbatches, paths of {} stages "
             "(skip ratio {:.2f}), planner {}\n",
             file, n, g.pipeline.stages, rep.agents.size(), g.skip.path_length,
             1.0 - double(g.skip.path_length) / g.pipeline.stages, g.skip.planner);
  fmt::print("placement:\n");
  for (std::size_t s = 0; s < rep.where.size(); ++s) {
    std::vector<std::string> names;
    for (int v : rep.where[s])
      names.push_back(fmt::format("{} ({})", v, net.locations[static_cast<std::size_t>(net.node_locations[v])]));
    fmt::print("  stage {}: {}\n", s, fmt::join(names, ", "));
  }
  fmt::print("paths (nodes | stages; each returns to its first node for the loss):\n");
  for (const auto& p : rep.paths)
    fmt::print("  microbatch {:>3}: {:<24} | {}\n", p.agent, fmt::format("{}", fmt::join(p.nodes, " ")),
               fmt::join(path_stages(rep, p, n), " "));
  if (g.skip_runs()) { // one stage actor per node: what `troupe run` routes
    fmt::print("routes of `troupe run` (microbatch k of a step, stage actors):\n");
    auto routes = skippipe_route_names(g, rep);
    for (std::size_t k = 0; k < routes.size(); ++k)
      fmt::print("  {:>3}: {}\n", k, fmt::join(routes[k], " -> "));
  }
  auto vs = [&](double t) { return fmt::format("{:.4g} s ({:+.1f}%)", t, 100.0 * (rep.planned / t - 1)); };
  fmt::print("iteration time under the cost model: planned {:.4g} s\n  against the full pipeline: DT-FM's {} (fixed "
             "chains matched by delay, SkipPipe's baseline); its chains planned alike {}; chain i on node i {}\n"
             "  random skipping {} (mean of {} draws)\n  the plan without collision awareness {}\n",
             rep.planned, vs(rep.dtfm), vs(rep.full), vs(rep.fixed_chains), vs(rep.random), rep.random_draws,
             vs(rep.blind));
  if (rep.cut_short)
    fmt::print("the search stopped at --time-limit: these are the best plans it had found by then\n");
}

/// Progress of a long search on stderr: nothing in the first 2 s, then a line
/// every 2 s with the phase, its work done, the best plan so far and, where
/// the phase has a budget, an estimate of what is left of it.
class progress_lines {
public:
  using clock = std::chrono::steady_clock;
  void operator()(std::string_view search, const search_progress& p) {
    auto now = clock::now();
    if (search != search_ || p.phase != phase_)
      search_ = std::string{search}, phase_ = p.phase, phase_start_ = now;
    if (now - start_ < std::chrono::seconds(2) || now - last_ < std::chrono::seconds(2))
      return;
    last_ = now;
    auto secs = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
    std::string work = p.of > 0 ? fmt::format("{} of {} steps", p.done, p.of) : fmt::format("{} moves", p.done);
    std::string left;
    if (p.of > 0 && p.done > 0)
      left = fmt::format(", about {:.0f} s left in this phase",
                         secs(now - phase_start_) * static_cast<double>(p.of - p.done) / static_cast<double>(p.done));
    fmt::print(stderr, "troupe plan paths: {}: phase {} of 4 ({}): {}{}{}; {:.0f} s so far\n", search, p.phase, p.what,
               work, p.best_s > 0 ? fmt::format(", best {:.4g} s", p.best_s) : std::string{}, left, secs(now - start_));
  }

private:
  clock::time_point start_ = clock::now(), last_ = start_, phase_start_ = start_;
  std::string search_;
  int phase_ = 0;
};

nlohmann::json to_json(const graph_spec& g, const skippipe_plan& rep) {
  nlohmann::json paths = nlohmann::json::array();
  for (const auto& p : rep.paths)
    paths.push_back({{"agent", p.agent}, {"nodes", p.nodes}, {"stages", path_stages(rep, p, g.network.nodes())}});
  std::vector<std::string> locations;
  for (int l : g.network.node_locations)
    locations.push_back(g.network.locations[static_cast<std::size_t>(l)]);
  nlohmann::json out{{"placement", rep.where},
                     {"locations", locations},
                     {"paths", paths},
                     {"time",
                      {{"planned", rep.planned},
                       {"full", rep.full},
                       {"full_fixed_chains", rep.fixed_chains},
                       {"full_dtfm", rep.dtfm},
                       {"random", rep.random},
                       {"no_collision_awareness", rep.blind}}},
                     {"expansions", rep.expansions},
                     {"cut_short", rep.cut_short}};
  if (g.skip_runs()) // microbatch k of a step's route in a run, as stage actors
    out["routes"] = skippipe_route_names(g, rep);
  return out;
}

int plan_paths(const std::string& file, const std::vector<std::string>& overrides, bool json, double time_limit) {
  auto loaded = load_graph_for_cli(file, overrides, /*check_corpus=*/false); // nothing is read
  if (!loaded.ok()) {
    for (const auto& d : loaded.errors)
      fmt::print(stderr, "{}\n", to_string(d));
    return bad_input;
  }
  skippipe_watch watch;
  if (time_limit > 0)
    watch.deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                          std::chrono::duration<double>(time_limit));
  watch.progress = progress_lines{};
  auto rep = plan_skippipe_graph(*loaded.graph, /*baselines=*/true, watch);
  if (!rep) {
    fmt::print(stderr, "troupe plan paths: {}: {}\n", file, rep.error().message);
    return bad_input;
  }
  if (json)
    fmt::print("{}\n", to_json(*loaded.graph, *rep).dump(2));
  else
    print_text(file, *loaded.graph, *rep);
  return ok;
}

} // namespace

/// The `plan` subcommand, listed in deploy/cli/commands.cpp.
command_action define_plan(CLI::App& app) {
  struct plan_args {
    std::string file;
    std::vector<std::string> overrides;
    bool json = false;
    double time_limit = 0;
  };
  auto a = std::make_shared<plan_args>();
  const std::string footer = std::string{"Exit codes: 0 success, 2 bad input or no plan.\n"} + paths_help;
  describe(app,
           "Plans what a graph file's sections describe (paths), or core attention across servers for given "
           "document lengths (attention).",
           footer);
  auto* sub = &add_command(app, "paths", "SkipPipe: placement, each microbatch's path, iteration time");
  describe(*sub,
           "Places the `network:` section's nodes on stage positions (skip.placement, or a search over DT-FM's "
           "score), plans each microbatch's path under `skip:` (SkipPipe: A* per microbatch, conflict-based "
           "search "
           "over node memory, stage capacity and time collisions) and prints the iteration time under the cost "
           "model against the full pipeline, random skipping and the plan without collision awareness.",
           footer);
  sub->add_option("FILE", a->file, "the graph file (YAML)")->required();
  sub->add_option("--set", a->overrides, "override a key, e.g. --set skip.path_length=3 (repeatable)")
    ->option_text("KEY.PATH=VALUE")
    ->allow_extra_args(false);
  sub->add_flag("--json", a->json,
                "print one JSON object: placement, paths (nodes, stages), time (planned, full, "
                "random, no_collision_awareness), cut_short");
  add_number(*sub, "--time-limit", a->time_limit, 0.001, 1e6, false,
             "stop searching after this many seconds and print the best plans found by then (default: search "
             "to the end)")
    ->option_text("SECONDS");
  auto* attention = &add_command(app, "attention", "DistCA: balance causal attention pairs across servers");
  auto run_attention = define_plan_attention(*attention);
  return [&app, sub, a, attention, run_attention] {
    if (sub->parsed())
      return plan_paths(a->file, a->overrides, a->json, a->time_limit);
    if (attention->parsed())
      return run_attention();
    fmt::print(stderr, "{}", app.help("troupe"));
    return static_cast<int>(bad_input);
  };
}

} // namespace troupe::cli
