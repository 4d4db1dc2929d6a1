// The `skip.planner` registry and the built-in planners, each a few lines over
// the searches of skippipe_planner.hpp (#14, #25 item 3).
#include "schedulers/planners/path_planner.hpp"

#include "schedulers/named_registry.hpp"

namespace troupe::sched {

namespace {

/// An iteration's time for `paths` under the cost model, with the paths.
path_plan timed(const planner_input& in, std::vector<planned_path> paths) {
  path_plan out;
  out.planned_s = simulate_iteration(in.problem, in.agents, paths).time;
  out.paths = std::move(paths);
  return out;
}

void register_builtin_planners(named_registry<path_planner>& r) {
  auto add = [&](std::string name, path_planner p) { r.add(std::move(name), std::move(p)); };
  add("skippipe", {"SkipPipe's collision-aware search over paths that skip and swap stages",
                   false,
                   {},
                   [](const planner_input& in) { return in.search("SkipPipe's paths", in.rules, true); }});
  add("full", {"every stage in order, chains chosen by the same search", true, {}, [](const planner_input& in) {
                 auto all = whole_pipeline_rules(in.rules, in.problem.stages, in.agents.size());
                 return in.search("the full pipeline", all, true);
               }});
  add("chains",
      {"DT-FM's fixed chains: chain i takes node i mod size of each stage",
       true,
       {},
       [](const planner_input& in) -> expected<path_plan> { return timed(in, plan_full(in.where, in.agents)); }});
  add("random", {"random skipping within the rules, drawn from skip.seed",
                 false,
                 {},
                 [](const planner_input& in) -> expected<path_plan> {
                   auto paths = plan_random(in.problem, in.where, in.rules, in.agents, in.seed);
                   if (!paths)
                     return paths.error();
                   return timed(in, std::move(*paths));
                 }});
}

named_registry<path_planner>& planners() {
  static auto* r = [] {
    auto* made = new named_registry<path_planner>; // never destroyed: plugins' planners point into their libraries
    register_builtin_planners(*made);
    return made;
  }();
  return *r;
}

} // namespace

void register_path_planner(std::string name, path_planner planner) {
  planners().add(std::move(name), std::move(planner));
}

const path_planner* find_path_planner(std::string_view name) {
  return planners().find(name);
}

std::vector<std::string> path_planner_names() {
  return planners().names();
}

path_rules whole_pipeline_rules(const path_rules& rules, int stages, std::size_t agents) {
  path_rules all = rules;
  all.path_length = stages;
  all.swaps = 0;
  all.max_jump = 1;
  all.memory = all.max_per_stage = static_cast<int>(agents);
  return all;
}

} // namespace troupe::sched
