// SkipPipe's plan for a graph (#14): the `network:` and `skip:` sections turned
// into a path problem, a placement of network nodes on stage positions and each
// microbatch's path; `troupe plan paths` prints it, and a run's router and
// channels follow it (each network node is one stage actor: graph_spec::skip_runs).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/graph/graph_spec.hpp"
#include "schedulers/planners/skippipe_planner.hpp"
#include "schedulers/sim/cost_model.hpp"

namespace troupe {

/// A graph's plan and, when asked for, what it is measured against.
struct skippipe_plan {
  sched::placement where;                 ///< network nodes per stage position
  std::vector<sched::path_agent> agents;  ///< pipeline.microbatches per stage-0 node, node by node
  std::vector<sched::planned_path> paths; ///< skip.planner's paths, one per agent
  double planned = 0;                     ///< their iteration time under the cost model, seconds
  // With baselines: the full pipeline (chains planned alike, and DT-FM's fixed
  // chains), random skipping (mean of draws) and the plan without collision awareness.
  double full = 0, fixed_chains = 0, random = 0, blind = 0;
  double dtfm = 0; ///< DT-FM's full pipeline: fixed chains matched by delay (plan_dtfm)
  int random_draws = 0;
  int expansions = 0;     ///< conflict-tree nodes the collision-aware search expanded
  bool cut_short = false; ///< a search stopped at the deadline: plans are the best found by then
};

/// A deadline for plan_skippipe_graph's searches and who hears how they go
/// (`search`: which plan is being searched, "SkipPipe's paths", …).
struct skippipe_watch {
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::function<void(std::string_view search, const sched::search_progress&)> progress;
};

/// The graph's model as the cost model sees it: its family's widths, so Llama's
/// grouped-query k and v and its gated MLP are priced as they run (planner and `troupe sim`).
sched::transformer_shape transformer_shape_of(const graph_spec& g);

/// What SkipPipe plans on, from the graph: a node's forward from the cost model
/// (model.layers / pipeline.stages layers on sim.device) and each hop's delay as
/// REFERENCES.md's SkipPipe delay model: latency + activation bytes / bandwidth +
/// the network's per-hop overhead, activations d_model·context·batch values.
sched::expected<sched::path_problem> skippipe_problem(const graph_spec& g);

/// Why a SkipPipe graph can be planned (`troupe plan paths`, `troupe sim`) but
/// not run: a run places one stage actor on each network node, so it needs
/// stages × replicas nodes. The diagnostic at network.nodes; nothing when it runs.
std::optional<diagnostic> skippipe_not_runnable(const graph_spec& g);

/// Why SkipPipe's paths cannot run under the graph's pipeline.schedule (gpipe
/// and 1f1b take stage 0's two chunks, the embedding's and the head's, in any
/// order), or nothing. The diagnostic at pipeline.schedule.
std::optional<diagnostic> skippipe_schedule_problem(const graph_spec& g);

/// Places the nodes (skip.placement, or the search over DT-FM's score) and plans
/// the paths skip.planner names: `skippipe`; `full`, every stage in order on
/// chains planned alike; `chains`, every stage in order on DT-FM's fixed chains
/// (agent i of stage-0 node j on chain j: with one node per stage actor, each
/// replica's own chain, as a plain pipeline routes); `random`. With `baselines`
/// also the other plans' times. The plan skip.planner names is searched first,
/// the baselines after it, all within `watch.deadline`.
sched::expected<skippipe_plan> plan_skippipe_graph(const graph_spec& g, bool baselines,
                                                   const skippipe_watch& watch = {});

/// The stages each path of skip.planner visits: pipeline.stages for the full
/// pipeline (`full`, `chains`), else skip.path_length.
int skippipe_path_stages(const graph_spec& g);

/// The stage position of each node of `plan.paths[i]`.
std::vector<int> path_stages(const skippipe_plan& plan, const sched::planned_path& p, int nodes);

/// The route of each microbatch of a step, as stage-actor hop names (routing_params::paths),
/// for a graph that runs its plan (skip_runs): microbatch k (0 .. replicas × microbatches
/// - 1) is agent (k mod R)·M + k div R, on stage-0 node placement[0][k mod R]; node
/// placement[s][i] is the stage actor of replica i at position s; the path returns to its
/// start's head chunk (`r0s0.1`).
std::vector<std::vector<std::string>> skippipe_route_names(const graph_spec& g, const skippipe_plan& plan);

/// The name of the stage actor of replica `replica` at position `position` (the
/// `pipeline:` shorthand's grid: `r1s2`, or `s2` with one replica).
std::string grid_stage_name(const graph_spec& g, int replica, int position);

} // namespace troupe
