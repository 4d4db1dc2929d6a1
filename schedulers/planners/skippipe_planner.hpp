// SkipPipe's path planner (Blagoev et al. 2025, arXiv 2502.19913; gensyn-ai/skippipe):
// microbatches are agents that each visit L of S stages, stage 0 first and last;
// a time-aware A* per agent and a conflict-based search over node memory,
// stage capacity and time collisions on a node. Plain code: no CAF.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "schedulers/expected.hpp"

namespace troupe::sched {

/// What a plan is priced on: each node's forward time for one microbatch and
/// the delay of one microbatch's activations (or gradients) between two nodes
/// (latency + bytes / bandwidth + per-hop overhead, REFERENCES.md, SkipPipe).
struct path_problem {
  int stages = 0;
  std::vector<double> forward;            ///< per node, seconds
  std::vector<std::vector<double>> delay; ///< [from][to], seconds
  double backward_factor = 1.5;           ///< backward = factor × forward (SkipPipe's cost)
  double loss_factor = 0.25;              ///< the loss on the start node = factor × its forward
  /// Microbatches a node past stage 0 holds at once, from its forward there to
  /// its backward there (0: no bound). Every plan is priced under it, a full
  /// pipeline's too: a forward waits for a free slot (gensyn-ai/skippipe's
  /// com_sym.py holds each node to its memory, its DT-FM baseline included).
  int memory = 0;
  int nodes() const { return static_cast<int>(forward.size()); }
};

/// The `skip:` rules a path obeys (SkipPipe's a_star_modified.py: swaps of distance
/// at most 1, at most 2 of them, no hop more than 4 stages past the furthest reached).
struct path_rules {
  int path_length = 0;   ///< L: stages each microbatch visits, stage 0 included
  int memory = 3;        ///< microbatches a node past stage 0 holds in one iteration
  int max_per_stage = 9; ///< microbatches a stage past 0 serves in one iteration
  int swaps = 2;         ///< visits to a stage below the furthest reached so far
  int swap_distance = 1; ///< how far below the furthest reached such a visit may be
  int max_jump = 4;      ///< how far past the furthest reached one hop may go
};

/// Nodes per stage position; stage 0's nodes hold the data and the loss.
using placement = std::vector<std::vector<int>>;

/// A microbatch: it starts (and ends) on stage-0 node `start`, released at `release`.
struct path_agent {
  int id = 0;
  int start = 0;
  double release = 0;
};

/// One microbatch's path: the nodes it visits forward, its start node first
/// (it returns there for the loss and runs the backward in reverse).
struct planned_path {
  int agent = 0;
  std::vector<int> nodes;
};

/// Stage sizes for `nodes` nodes over `stages` positions: ⌊N/S⌋ each, the rest on
/// stage 0 (SkipPipe's 20 nodes over 6 stages: 5, 3, 3, 3, 3, 3).
std::vector<int> stage_sizes(int nodes, int stages);

/// The stage of each node under `p`.
std::vector<int> stage_of(const placement& p, int nodes);

/// DT-FM's placement score (Yuan et al. 2022; REFERENCES.md): `dp_factor` × the
/// data-parallel cost (the slowest link inside a position) + 2 × the pipeline cost
/// (per boundary, the mean over a position's nodes of its fastest link onward).
double placement_score(const path_problem& pr, const placement& p, double dp_factor);

/// Nodes placed on positions of stage_sizes() by a local search over pairwise
/// swaps from random starts (seeded), minimizing placement_score().
placement search_placement(const path_problem& pr, double dp_factor, std::uint64_t seed, int restarts = 16);

/// `per_start` agents on each stage-0 node, the k-th released after k forwards
/// of its node (SkipPipe's create_schedule.py: Agent(..., k·w)).
std::vector<path_agent> make_agents(const path_problem& pr, const placement& p, int per_start);

/// What one agent alone on `nodes` takes, in closed form: release + (1 + loss +
/// backward)·f₀ + (1 + backward)·Σ fᵢ + the delays of the cycle both ways
/// (with SkipPipe's factors: dt + 2.75·w₀ + 2.5·Σ wᵢ + 2·Σ e).
double alone_time(const path_problem& pr, const path_agent& a, const std::vector<int>& nodes);

/// Why `nodes` breaks the rules for an agent starting on `start` (starts on it,
/// L stages, none twice, swaps and jumps within limits), or nullopt.
std::optional<std::string> check_path(const placement& p, const path_rules& rules, const std::vector<int>& nodes,
                                      int start, int nodes_total);

/// Why `paths` together exceed a node's memory or a stage's capacity, or nullopt.
std::optional<std::string> check_capacity(const placement& p, const path_rules& rules,
                                          const std::vector<planned_path>& paths, int nodes_total);

/// The iteration under the cost model: every node runs one pass at a time, the
/// earliest arrived first (backward before forward on a tie), each pass's output
/// reaching the next node after the link's delay; a forward on a node past stage
/// 0 that holds pr.memory microbatches waits until one's backward there ends
/// (should every remaining pass wait so, the earliest runs anyway). Ends when
/// every microbatch's backward on its start node is done.
struct iteration_result {
  /// One pass as it ran.
  struct pass_time {
    int node;
    double begin, end;
  };
  double time = 0;
  std::vector<int> passes;                  ///< per node: passes run
  std::vector<std::vector<pass_time>> runs; ///< per path: its passes, in order
};
iteration_result simulate_iteration(const path_problem& pr, const std::vector<path_agent>& agents,
                                    const std::vector<planned_path>& paths);

/// A plan and what the search did.
struct path_plan {
  std::vector<planned_path> paths;
  double planned_s = 0;   ///< simulate_iteration's time
  int expansions = 0;     ///< conflict-tree nodes expanded
  bool cut_short = false; ///< the deadline stopped the search: the best plan found by then
};

/// Where a search stands, for a progress line.
struct search_progress {
  int phase = 1;         ///< 1..4 (plan_skippipe's phases)
  const char* what = ""; ///< the phase in words
  long done = 0;         ///< work done in the phase
  long of = 0;           ///< the phase's budget; 0: it ends when a round stops helping
  double best_s = 0;     ///< the best plan's iteration time so far (0: none yet)
};

/// How long a search may go on, and who hears how it goes.
struct search_limits {
  /// Past it the search stops with the best plan found so far; still without one
  /// that keeps memory and capacity (phase 1), it takes prioritized planning's,
  /// or if that finds none searches on within its budget.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  /// Called often (each expansion or move); the callee decides when to print.
  std::function<void(const search_progress&)> progress;
};

/// SkipPipe's planner: A* per agent, conflict-based search over node memory and
/// stage capacity (always resolved), then, when `collision_aware`, over time
/// collisions on a node where one of the two passes is a forward (the paper's TC2),
/// keeping the plan the iteration simulation finds fastest within `budget` expansions;
/// then, collision-aware, each microbatch in turn is replanned around the passes the
/// others run in the simulated iteration (their busy times on each node as windows),
/// within memory and capacity, while that shortens the iteration; last, a local
/// search moves each microbatch to the allowed path that shortens the simulated
/// iteration most (within memory and capacity), in rounds while one helps.
expected<path_plan> plan_skippipe(const path_problem& pr, const placement& p, const path_rules& rules,
                                  const std::vector<path_agent>& agents, bool collision_aware, int budget = 4000,
                                  const search_limits& limits = {});

/// The full pipeline: every microbatch visits every stage in order, on the chain of
/// its start node's index (DT-FM: chain i takes node i mod size of each position).
std::vector<planned_path> plan_full(const placement& p, const std::vector<path_agent>& agents);

/// DT-FM's full pipeline (Yuan et al. 2022; gensyn-ai/skippipe create_schedule.py's
/// "baseline"): C fixed chains, C the smallest position past stage 0, each through
/// one node of every position; position by position, the chains take the nodes
/// that add the least delay to them (an exhaustive assignment, positions hold a
/// few nodes); stage 0's other nodes send nothing (as in SkipPipe's baseline).
/// The same number of microbatches, dealt round robin over the chains, the j-th
/// on a chain released after j forwards of its first node.
struct full_pipeline {
  std::vector<path_agent> agents;
  std::vector<planned_path> paths;
};
full_pipeline plan_dtfm(const path_problem& pr, const placement& p, std::size_t microbatches);

/// Random skipping (DT-FM with skips): each agent in turn takes L-1 random stages
/// in increasing order and a random node of each, among those with room left.
expected<std::vector<planned_path>> plan_random(const path_problem& pr, const placement& p, const path_rules& rules,
                                                const std::vector<path_agent>& agents, std::uint64_t seed);

} // namespace troupe::sched
