// SkipPipe's planner: a time-aware A* per microbatch and a conflict-based search
// (Sharon et al. 2015) over node memory, stage capacity and time collisions
// (Blagoev et al. 2025, §4; gensyn-ai/skippipe schedulers/a_star_modified.py, CBS.py).
#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "schedulers/planners/skippipe_planner.hpp"

namespace troupe::sched {

namespace {

/// A span of time on a node an agent may not start or run a pass in (a time collision resolved).
struct window {
  int node;
  double begin, end;
  auto operator<=>(const window&) const = default;
};

/// What the conflict tree forbids one agent.
struct agent_constraints {
  std::set<int> nodes, stages;
  std::set<window> windows;
  auto operator<=>(const agent_constraints&) const = default;
};

/// One pass of an agent on a node, as planned.
struct visit {
  int node;
  double begin, end;
  bool forward;
};

struct agent_plan {
  std::vector<int> nodes;
  std::vector<visit> visits;
  double finish = 0;
};

/// When a pass of `duration` may start on `node` at or after `t`, outside the agent's windows.
double start_at(const agent_constraints& c, int node, double t, double duration) {
  for (bool moved = true; moved;) {
    moved = false;
    for (auto it = c.windows.lower_bound({node, -std::numeric_limits<double>::infinity(), 0});
         it != c.windows.end() && it->node == node; ++it)
      if (t < it->end && t + duration > it->begin) {
        t = it->end;
        moved = true;
      }
  }
  return t;
}

/// Whether a path through `nodes` (the furthest stage reached `frontier`, `swaps`
/// used) may go on to node `v` under the skip rules; if so, `frontier` and `swaps`
/// become the path's after it.
bool may_visit(const std::vector<int>& stage, const path_rules& rules, const std::vector<int>& nodes, int v,
               int& frontier, int& swaps) {
  const int s = stage[v];
  if (s <= 0 || std::any_of(nodes.begin(), nodes.end(), [&](int u) { return stage[u] == s; }))
    return false;
  if (s > frontier) {
    if (s - frontier > rules.max_jump)
      return false;
    frontier = s;
    return true;
  }
  return frontier - s <= rules.swap_distance && ++swaps <= rules.swaps;
}

/// The timed passes of one agent on `nodes` (forward, loss on the start, backward in reverse).
agent_plan time_path(const path_problem& pr, const path_agent& a, const std::vector<int>& nodes,
                     const agent_constraints& c) {
  agent_plan p{nodes, {}, 0};
  double t = a.release;
  int at = nodes.front();
  auto run = [&](int node, double duration, bool forward) {
    t += pr.delay[at][node];
    double begin = start_at(c, node, t, duration);
    t = begin + duration;
    at = node;
    p.visits.push_back({node, begin, t, forward});
  };
  for (int n : nodes)
    run(n, pr.forward[n], true);
  run(nodes.front(), pr.loss_factor * pr.forward[nodes.front()], false);
  for (std::size_t i = nodes.size(); i-- > 0;)
    run(nodes[i], pr.backward_factor * pr.forward[nodes[i]], false);
  p.finish = t;
  return p;
}

/// The time-aware A*: partial paths ordered by the end of their last forward plus
/// the backward they are sure to need; a complete path by its exact finish.
std::optional<agent_plan> a_star(const path_problem& pr, const std::vector<int>& stage, const path_rules& rules,
                                 const path_agent& a, const agent_constraints& c) {
  struct item {
    double priority;
    double t;    // the last forward's end
    double owed; // backward passes and return delays of the prefix
    int frontier, swaps;
    std::vector<int> nodes;
    bool complete;
  };
  auto later = [](const item& x, const item& y) { return x.priority > y.priority; };
  std::priority_queue<item, std::vector<item>, decltype(later)> open{later};
  const int start = a.start;
  double t0 = start_at(c, start, a.release, pr.forward[start]) + pr.forward[start];
  double owed0 = (pr.loss_factor + pr.backward_factor) * pr.forward[start];
  open.push({t0 + owed0, t0, owed0, 0, 0, {start}, false});
  while (!open.empty()) {
    item it = open.top();
    open.pop();
    if (it.complete) {
      return time_path(pr, a, it.nodes, c);
    }
    if (static_cast<int>(it.nodes.size()) == rules.path_length) {
      auto done = time_path(pr, a, it.nodes, c);
      open.push({done.finish, 0, 0, 0, 0, std::move(it.nodes), true});
      continue;
    }
    const int last = it.nodes.back();
    for (int v = 0; v < pr.nodes(); ++v) {
      int frontier = it.frontier, swaps = it.swaps;
      if (c.nodes.count(v) || c.stages.count(stage[v]) || !may_visit(stage, rules, it.nodes, v, frontier, swaps))
        continue;
      double begin = start_at(c, v, it.t + pr.delay[last][v], pr.forward[v]);
      double t = begin + pr.forward[v];
      double owed = it.owed + pr.backward_factor * pr.forward[v] + pr.delay[v][last];
      auto nodes = it.nodes;
      nodes.push_back(v);
      open.push({t + owed, t, owed, frontier, swaps, std::move(nodes), false});
    }
  }
  return std::nullopt;
}

/// A node of the conflict tree.
struct ct_node {
  std::vector<agent_constraints> cons;
  std::vector<agent_plan> plans;
  double cost = 0;  ///< the latest planned finish
  double total = 0; ///< the sum of planned finishes
  int excess = 0;   ///< microbatches over memory and capacity
};

/// The first conflict of a node: kind 1 node memory, 2 stage capacity, 3 time collision.
struct conflict {
  int kind = 0;
  int where = 0;                ///< the node (1, 3) or stage (2)
  std::vector<int> agents;      ///< those who could give way (1, 2), or the two colliding (3)
  std::vector<window> give_way; ///< kind 3: what each of the two would avoid
};

class planner {
public:
  planner(const path_problem& pr, const placement& p, const path_rules& rules, const std::vector<path_agent>& agents)
      : pr_(pr), rules_(rules), agents_(agents), stage_(stage_of(p, pr.nodes())), stages_(static_cast<int>(p.size())) {}

  std::optional<ct_node> root() {
    ct_node n;
    n.cons.resize(agents_.size());
    for (const auto& a : agents_) {
      auto plan = a_star(pr_, stage_, rules_, a, n.cons[static_cast<std::size_t>(a.id)]);
      if (!plan)
        return std::nullopt;
      n.plans.push_back(std::move(*plan));
    }
    score(n);
    return n;
  }

  /// Counts what a node's plans ask beyond memory and capacity, and its cost.
  void score(ct_node& n) const {
    std::vector<int> per_node(static_cast<std::size_t>(pr_.nodes()), 0), per_stage(stages_, 0);
    n.cost = n.total = 0;
    for (const auto& p : n.plans) {
      n.cost = std::max(n.cost, p.finish);
      n.total += p.finish;
      for (std::size_t i = 1; i < p.nodes.size(); ++i)
        ++per_node[p.nodes[i]], ++per_stage[stage_[p.nodes[i]]];
    }
    n.excess = 0;
    for (int v = 0; v < pr_.nodes(); ++v)
      n.excess += stage_[v] > 0 ? std::max(0, per_node[v] - rules_.memory) : 0;
    for (int s = 1; s < stages_; ++s)
      n.excess += std::max(0, per_stage[s] - rules_.max_per_stage);
  }

  /// The node's first conflict of the kinds asked for, or kind 0.
  conflict first_conflict(const ct_node& n, bool collisions) const {
    conflict c;
    auto visitors = [&](auto pred) {
      std::vector<std::pair<double, int>> who; // slowest first: they gain most from another way
      for (std::size_t a = 0; a < n.plans.size(); ++a)
        for (std::size_t i = 1; i < n.plans[a].nodes.size(); ++i)
          if (pred(n.plans[a].nodes[i]))
            who.emplace_back(-n.plans[a].finish, static_cast<int>(a));
      std::sort(who.begin(), who.end());
      std::vector<int> out;
      for (auto [_, a] : who)
        out.push_back(a);
      return out;
    };
    for (int s = 1; s < stages_; ++s)
      if (auto who = visitors([&](int v) { return stage_[v] == s; });
          static_cast<int>(who.size()) > rules_.max_per_stage)
        return {2, s, who, {}};
    for (int v = 0; v < pr_.nodes(); ++v)
      if (auto who = visitors([&](int u) { return u == v; });
          stage_[v] > 0 && static_cast<int>(who.size()) > rules_.memory)
        return {1, v, who, {}};
    if (!collisions)
      return c;
    for (std::size_t a = 0; a < n.plans.size(); ++a)
      for (std::size_t b = a + 1; b < n.plans.size(); ++b)
        for (const auto& x : n.plans[a].visits)
          for (const auto& y : n.plans[b].visits)
            if (x.node == y.node && (x.forward || y.forward) && x.begin < y.end && y.begin < x.end)
              return {3,
                      x.node,
                      {static_cast<int>(a), static_cast<int>(b)},
                      {{x.node, y.begin, y.end}, {y.node, x.begin, x.end}}};
    return c;
  }

  /// The children of `n` that resolve `c`, each with one agent replanned.
  std::vector<ct_node> children(const ct_node& n, const conflict& c) const {
    std::vector<ct_node> out;
    for (std::size_t k = 0; k < c.agents.size(); ++k) {
      auto a = static_cast<std::size_t>(c.agents[k]);
      ct_node child{n.cons, n.plans, 0, 0, 0};
      auto& cons = child.cons[a];
      if (c.kind == 1)
        cons.nodes.insert(c.where);
      else if (c.kind == 2)
        cons.stages.insert(c.where);
      else
        cons.windows.insert(c.give_way[k]);
      auto plan = a_star(pr_, stage_, rules_, agents_[a], cons);
      if (!plan)
        continue;
      child.plans[a] = std::move(*plan);
      score(child);
      out.push_back(std::move(child));
    }
    return out;
  }

  /// Prioritized planning: agents one after another, the slowest alone first, each
  /// by A* over the nodes and stages that still have room. A plan within memory and
  /// capacity, or nullopt when an agent finds none.
  std::optional<ct_node> prioritized(const ct_node& root) const {
    std::vector<std::size_t> order(agents_.size());
    for (std::size_t a = 0; a < order.size(); ++a)
      order[a] = a;
    std::stable_sort(order.begin(), order.end(),
                     [&](auto x, auto y) { return root.plans[x].finish > root.plans[y].finish; });
    ct_node n = root;
    std::vector<int> per_node(static_cast<std::size_t>(pr_.nodes()), 0), per_stage(stages_, 0);
    for (auto a : order) {
      agent_constraints c;
      forbid_full(per_node, per_stage, c);
      auto plan = a_star(pr_, stage_, rules_, agents_[a], c);
      if (!plan)
        return std::nullopt;
      for (std::size_t i = 1; i < plan->nodes.size(); ++i)
        ++per_node[plan->nodes[i]], ++per_stage[stage_[plan->nodes[i]]];
      n.cons[a] = std::move(c);
      n.plans[a] = std::move(*plan);
    }
    score(n);
    return n;
  }

  /// Replans agent `a` of `paths` around the passes the others ran in `sim`, keeping
  /// memory and capacity; nullopt when it finds no path.
  std::optional<std::vector<int>> around(const std::vector<planned_path>& paths, const iteration_result& sim,
                                         std::size_t a) const {
    agent_constraints c;
    std::vector<int> per_node(static_cast<std::size_t>(pr_.nodes()), 0), per_stage(stages_, 0);
    for (std::size_t b = 0; b < paths.size(); ++b) {
      if (b == a)
        continue;
      for (std::size_t i = 1; i < paths[b].nodes.size(); ++i)
        ++per_node[paths[b].nodes[i]], ++per_stage[stage_[paths[b].nodes[i]]];
      for (const auto& run : sim.runs[b])
        c.windows.insert({run.node, run.begin, run.end});
    }
    forbid_full(per_node, per_stage, c);
    auto plan = a_star(pr_, stage_, rules_, agents_[a], c);
    if (!plan)
      return std::nullopt;
    return plan->nodes;
  }

  /// Forbids the nodes at memory and the stages at capacity, given what others hold.
  void forbid_full(const std::vector<int>& per_node, const std::vector<int>& per_stage, agent_constraints& c) const {
    for (int v = 0; v < pr_.nodes(); ++v)
      if (stage_[v] > 0 && per_node[v] >= rules_.memory)
        c.nodes.insert(v);
    for (int s = 1; s < stages_; ++s)
      if (per_stage[s] >= rules_.max_per_stage)
        c.stages.insert(s);
  }

  /// Every path agent `a` may take under the skip rules (stages, swaps, jumps), in
  /// a fixed order: the neighbourhood the last phase searches.
  std::vector<std::vector<int>> all_paths(const path_agent& a) const {
    std::vector<std::vector<int>> out;
    std::vector<int> nodes{a.start};
    auto extend = [&](auto&& self, int frontier, int swaps) -> void {
      if (static_cast<int>(nodes.size()) == rules_.path_length) {
        out.push_back(nodes);
        return;
      }
      for (int v = 0; v < pr_.nodes(); ++v) {
        int f = frontier, w = swaps;
        if (!may_visit(stage_, rules_, nodes, v, f, w))
          continue;
        nodes.push_back(v);
        self(self, f, w);
        nodes.pop_back();
      }
    };
    extend(extend, 0, 0);
    return out;
  }

  /// Whether `paths` keep node memory and stage capacity.
  bool within_limits(const std::vector<planned_path>& paths) const {
    std::vector<int> per_node(static_cast<std::size_t>(pr_.nodes()), 0), per_stage(stages_, 0);
    for (const auto& p : paths)
      for (std::size_t i = 1; i < p.nodes.size(); ++i)
        if (++per_node[p.nodes[i]] > rules_.memory || ++per_stage[stage_[p.nodes[i]]] > rules_.max_per_stage)
          return false;
    return true;
  }

  std::vector<planned_path> paths(const ct_node& n) const {
    std::vector<planned_path> out;
    for (std::size_t a = 0; a < n.plans.size(); ++a)
      out.push_back({agents_[a].id, n.plans[a].nodes});
    return out;
  }

private:
  const path_problem& pr_;
  const path_rules& rules_;
  const std::vector<path_agent>& agents_;
  std::vector<int> stage_;
  int stages_;
};

/// Serialized constraints: a tree node reached twice is expanded once.
std::string key_of(const ct_node& n) {
  std::string k;
  for (const auto& c : n.cons) {
    for (int v : c.nodes)
      k += fmt::format("n{}", v);
    for (int s : c.stages)
      k += fmt::format("s{}", s);
    for (const auto& w : c.windows)
      k += fmt::format("w{}:{:.9g}:{:.9g}", w.node, w.begin, w.end);
    k += '|';
  }
  return k;
}

} // namespace

expected<path_plan> plan_skippipe(const path_problem& pr, const placement& p, const path_rules& rules,
                                  const std::vector<path_agent>& agents, bool collision_aware, int budget,
                                  const search_limits& limits) {
  planner pl{pr, p, rules, agents};
  auto root = pl.root();
  if (!root)
    return make_sched_error("a microbatch has no path that keeps the skip rules (path_length, swaps, jumps)");
  path_plan result;
  // Reports where the search is; true when the deadline has passed: phase 1 then
  // goes straight to prioritized planning (searching on only if that finds no
  // plan), phases 2-4 stop with the best plan so far.
  auto at = [&](int phase, const char* what, long done, long of) {
    if (limits.progress)
      limits.progress({phase, what, done, of, result.planned_s});
    if (!limits.deadline || std::chrono::steady_clock::now() < *limits.deadline)
      return false;
    result.cut_short = true;
    return true;
  };
  std::set<std::string> seen;
  // Phase 1: memory and capacity, which a plan must keep. Best-first by the latest
  // finish (within 2% of the root's counted as equal), then the microbatches still
  // over memory and capacity, then the summed finishes. Where memory and capacity
  // are tight that can stall: then, after half the budget, prioritized planning
  // gives the plan, or failing that the excess comes first (each step moves the
  // microbatch that loses least by going elsewhere).
  std::optional<ct_node> feasible;
  for (double band : {0.02 * root->cost, 0.0}) {
    if (band == 0.0 && (feasible = pl.prioritized(*root)))
      break;
    auto bucket = [band](double c) { return band > 0 ? std::floor(c / band) : 0.0; };
    auto worse = [&](const ct_node& a, const ct_node& b) {
      return std::tuple{bucket(a.cost), a.excess, a.cost, a.total} >
             std::tuple{bucket(b.cost), b.excess, b.cost, b.total};
    };
    std::priority_queue<ct_node, std::vector<ct_node>, decltype(worse)> open{worse};
    open.push(*root);
    seen.clear();
    for (int spent = 0; !open.empty() && spent < budget / 2 && !feasible; ++spent) {
      if (at(1, "memory and capacity", spent, budget / 2) && band > 0)
        break; // past the deadline: prioritized planning next, and only if it fails the search goes on
      ct_node n = open.top();
      open.pop();
      ++result.expansions;
      auto c = pl.first_conflict(n, false);
      if (c.kind == 0)
        feasible = std::move(n);
      else
        for (auto& child : pl.children(n, c))
          if (seen.insert(key_of(child)).second)
            open.push(std::move(child));
    }
    if (feasible)
      break;
  }
  if (!feasible)
    return make_sched_error(fmt::format("no plan keeps node memory {} and stage capacity {} ({} conflict-tree nodes "
                                        "searched): raise skip.memory or skip.max_per_stage",
                                        rules.memory, rules.max_per_stage, result.expansions));
  result.paths = pl.paths(*feasible);
  result.planned_s = simulate_iteration(pr, agents, result.paths).time;
  if (!collision_aware)
    return result;
  // Phase 2: time collisions (TC2), best-first by planned finish; every node that
  // keeps memory and capacity is simulated, and the fastest one is the plan.
  auto later = [](const ct_node& a, const ct_node& b) { return a.cost > b.cost; };
  std::priority_queue<ct_node, std::vector<ct_node>, decltype(later)> queue{later};
  queue.push(std::move(*feasible));
  const int phase2_budget = result.expansions + budget;
  while (!queue.empty() && result.expansions < phase2_budget) {
    if (at(2, "time collisions", result.expansions - (phase2_budget - budget), budget))
      return result;
    ct_node n = queue.top();
    queue.pop();
    ++result.expansions;
    auto c = pl.first_conflict(n, true);
    if (c.kind != 1 && c.kind != 2) {
      auto paths = pl.paths(n);
      if (double t = simulate_iteration(pr, agents, paths).time; t < result.planned_s) {
        result.planned_s = t;
        result.paths = std::move(paths);
      }
    }
    for (auto& child : pl.children(n, c)) // none when c.kind == 0: the search goes on with the others
      if (seen.insert(key_of(child)).second)
        queue.push(std::move(child));
  }
  // Phase 3: each microbatch replanned around the others' simulated passes, kept when
  // the iteration gets shorter, for as long as a round improves it.
  const int phase3_start = result.expansions;
  for (bool improved = true; improved && result.expansions < phase2_budget + budget;) {
    improved = false;
    for (std::size_t a = 0; a < agents.size(); ++a, ++result.expansions) {
      if (at(3, "each microbatch around the others", result.expansions - phase3_start,
             phase2_budget + budget - phase3_start))
        return result;
      auto sim = simulate_iteration(pr, agents, result.paths);
      auto nodes = pl.around(result.paths, sim, a);
      if (!nodes || *nodes == result.paths[a].nodes)
        continue;
      auto paths = result.paths;
      paths[a].nodes = std::move(*nodes);
      if (double t = simulate_iteration(pr, agents, paths).time; t < result.planned_s - 1e-9) {
        result.planned_s = t;
        result.paths = std::move(paths);
        improved = true;
      }
    }
  }
  // Phase 4: a local search over whole paths. Each microbatch in turn takes, of every
  // path the rules allow it, the one that gives the shortest simulated iteration (the
  // sum of the microbatches' finishes breaking ties, so the search moves across the
  // plateaus a makespan leaves), within memory and capacity; rounds while it helps.
  // On SkipPipe's geo20 instance this takes the plan from 37.9 s to 36.4 s.
  auto measure = [&](const std::vector<planned_path>& paths) {
    auto sim = simulate_iteration(pr, agents, paths);
    double total = 0;
    for (const auto& run : sim.runs)
      total += run.empty() ? 0 : run.back().end;
    return std::pair{sim.time, total};
  };
  auto best = measure(result.paths);
  long moves = 0;
  for (bool improved = true; improved;) {
    improved = false;
    for (std::size_t a = 0; a < agents.size(); ++a, ++moves) {
      if (at(4, "local search over whole paths", moves, 0)) {
        result.planned_s = best.first;
        return result;
      }
      auto paths = result.paths;
      for (auto& nodes : pl.all_paths(agents[static_cast<std::size_t>(result.paths[a].agent)])) {
        paths[a].nodes = std::move(nodes);
        if (!pl.within_limits(paths))
          continue;
        if (auto m = measure(paths);
            m.first < best.first - 1e-9 || (m.first < best.first + 1e-9 && m.second < best.second - 1e-9)) {
          best = m;
          result.paths[a] = paths[a];
          improved = true;
        }
      }
    }
  }
  result.planned_s = best.first;
  return result;
}

} // namespace troupe::sched
