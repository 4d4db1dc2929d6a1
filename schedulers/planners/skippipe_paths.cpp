// What SkipPipe's planner stands on: stage sizes and placement, the path rules,
// one agent's closed-form cost, the iteration simulated pass by pass, and the
// two baselines (the full pipeline and random skipping).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "schedulers/planners/skippipe_planner.hpp"

namespace troupe::sched {

std::vector<int> stage_sizes(int nodes, int stages) {
  std::vector<int> sizes(static_cast<std::size_t>(std::max(stages, 0)), stages > 0 ? nodes / stages : 0);
  if (!sizes.empty())
    sizes[0] += nodes - (nodes / stages) * stages;
  return sizes;
}

std::vector<int> stage_of(const placement& p, int nodes) {
  std::vector<int> s(static_cast<std::size_t>(nodes), -1);
  for (std::size_t st = 0; st < p.size(); ++st)
    for (int n : p[st])
      s[static_cast<std::size_t>(n)] = static_cast<int>(st);
  return s;
}

double placement_score(const path_problem& pr, const placement& p, double dp_factor) {
  double dp = 0, pp = 0;
  for (const auto& st : p)
    for (int a : st)
      for (int b : st)
        dp = std::max(dp, pr.delay[a][b]);
  for (std::size_t s = 0; s + 1 < p.size(); ++s) {
    double sum = 0;
    for (int a : p[s]) {
      double best = std::numeric_limits<double>::infinity();
      for (int b : p[s + 1])
        best = std::min(best, pr.delay[a][b]);
      sum += best;
    }
    pp += sum / static_cast<double>(std::max<std::size_t>(p[s].size(), 1));
  }
  return dp_factor * dp + 2 * pp;
}

placement search_placement(const path_problem& pr, double dp_factor, std::uint64_t seed, int restarts) {
  auto sizes = stage_sizes(pr.nodes(), pr.stages);
  std::mt19937_64 rng{seed};
  placement best;
  double best_score = std::numeric_limits<double>::infinity();
  std::vector<int> order(static_cast<std::size_t>(pr.nodes()));
  for (int r = 0; r < std::max(restarts, 1); ++r) {
    std::iota(order.begin(), order.end(), 0);
    if (r > 0) // the first start is the nodes in order
      std::shuffle(order.begin(), order.end(), rng);
    placement p(sizes.size());
    std::size_t next = 0;
    for (std::size_t s = 0; s < sizes.size(); ++s)
      for (int k = 0; k < sizes[s]; ++k)
        p[s].push_back(order[next++]);
    double score = placement_score(pr, p, dp_factor);
    for (bool improved = true; improved;) { // swap two nodes of different positions while it helps
      improved = false;
      for (std::size_t a = 0; a < p.size(); ++a)
        for (std::size_t b = a + 1; b < p.size(); ++b)
          for (auto& x : p[a])
            for (auto& y : p[b]) {
              std::swap(x, y);
              double s2 = placement_score(pr, p, dp_factor);
              if (s2 < score - 1e-12) {
                score = s2;
                improved = true;
              } else {
                std::swap(x, y);
              }
            }
    }
    if (score < best_score) {
      best_score = score;
      best = p;
    }
  }
  return best;
}

std::vector<path_agent> make_agents(const path_problem& pr, const placement& p, int per_start) {
  std::vector<path_agent> agents;
  for (int start : p.front())
    for (int k = 0; k < per_start; ++k)
      agents.push_back({static_cast<int>(agents.size()), start, k * pr.forward[start]});
  return agents;
}

double alone_time(const path_problem& pr, const path_agent& a, const std::vector<int>& nodes) {
  const double f0 = pr.forward[a.start];
  double t = a.release + (1 + pr.loss_factor + pr.backward_factor) * f0;
  for (std::size_t i = 1; i < nodes.size(); ++i)
    t += (1 + pr.backward_factor) * pr.forward[nodes[i]];
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    int from = nodes[i], to = nodes[(i + 1) % nodes.size()];
    t += pr.delay[from][to] + pr.delay[to][from];
  }
  return t;
}

std::optional<std::string> check_path(const placement& p, const path_rules& rules, const std::vector<int>& nodes,
                                      int start, int nodes_total) {
  auto stage = stage_of(p, nodes_total);
  if (nodes.empty() || nodes.front() != start)
    return fmt::format("does not start on its start node {}", start);
  if (static_cast<int>(nodes.size()) != rules.path_length)
    return fmt::format("visits {} stages, not {}", nodes.size(), rules.path_length);
  if (stage[start] != 0)
    return fmt::format("starts on node {} of stage {}, not stage 0", start, stage[start]);
  std::vector<char> seen(p.size(), 0);
  int frontier = 0, swaps = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    int s = stage[nodes[i]];
    if (seen[s])
      return fmt::format("visits stage {} twice", s);
    seen[s] = 1;
    if (i == 0)
      continue;
    if (s > frontier) {
      if (s - frontier > rules.max_jump)
        return fmt::format("jumps from stage {} to {}, more than {} past the furthest reached", frontier, s,
                           rules.max_jump);
      frontier = s;
    } else if (frontier - s > rules.swap_distance || ++swaps > rules.swaps) {
      return fmt::format("swaps back to stage {} from {} beyond the limits (distance {}, {} swaps)", s, frontier,
                         rules.swap_distance, rules.swaps);
    }
  }
  return std::nullopt;
}

std::optional<std::string> check_capacity(const placement& p, const path_rules& rules,
                                          const std::vector<planned_path>& paths, int nodes_total) {
  auto stage = stage_of(p, nodes_total);
  std::vector<int> per_node(static_cast<std::size_t>(nodes_total), 0), per_stage(p.size(), 0);
  for (const auto& path : paths)
    for (std::size_t i = 1; i < path.nodes.size(); ++i) {
      ++per_node[path.nodes[i]];
      ++per_stage[stage[path.nodes[i]]];
    }
  for (int n = 0; n < nodes_total; ++n)
    if (stage[n] > 0 && per_node[n] > rules.memory)
      return fmt::format("node {} holds {} microbatches, memory is {}", n, per_node[n], rules.memory);
  for (std::size_t s = 1; s < p.size(); ++s)
    if (per_stage[s] > rules.max_per_stage)
      return fmt::format("stage {} serves {} microbatches, at most {}", s, per_stage[s], rules.max_per_stage);
  return std::nullopt;
}

iteration_result simulate_iteration(const path_problem& pr, const std::vector<path_agent>& agents,
                                    const std::vector<planned_path>& paths) {
  struct pass {
    int node;
    double duration;
    bool backward;
    int hold; ///< +1: takes a slot of the node's memory; -1: gives it back when it ends
  };
  std::vector<std::vector<pass>> passes(paths.size());
  for (std::size_t a = 0; a < paths.size(); ++a) {
    const auto& v = paths[a].nodes;
    for (std::size_t i = 0; i < v.size(); ++i)
      passes[a].push_back({v[i], pr.forward[v[i]], false, i > 0 ? 1 : 0});
    passes[a].push_back({v.front(), pr.loss_factor * pr.forward[v.front()], true, 0});
    for (std::size_t i = v.size(); i-- > 0;)
      passes[a].push_back({v[i], pr.backward_factor * pr.forward[v[i]], true, i > 0 ? -1 : 0});
  }
  std::vector<int> held(static_cast<std::size_t>(pr.nodes()), 0);
  iteration_result r;
  r.passes.assign(static_cast<std::size_t>(pr.nodes()), 0);
  r.runs.resize(paths.size());
  std::vector<double> free_at(static_cast<std::size_t>(pr.nodes()), 0), ready(paths.size());
  std::vector<std::size_t> next(paths.size(), 0);
  for (std::size_t a = 0; a < paths.size(); ++a)
    ready[a] = agents[static_cast<std::size_t>(paths[a].agent)].release;
  // A memory slot comes free when the backward holding it ends: (end, node), earliest first.
  std::vector<std::pair<double, int>> releases;
  for (;;) {
    // The pass that can start earliest; on a node, the one that arrived first, backward first on a tie.
    // A forward into a full node can start once a slot there comes free.
    std::size_t pick = paths.size();
    double pick_start = 0;
    for (int capped = pr.memory > 0 ? 1 : 0; capped >= 0 && pick == paths.size(); --capped)
      for (std::size_t a = 0; a < paths.size(); ++a) {
        if (next[a] == passes[a].size())
          continue;
        const auto& ps = passes[a][next[a]];
        double start = std::max(ready[a], free_at[ps.node]);
        if (capped && ps.hold > 0 && held[ps.node] >= pr.memory) {
          // The earliest end of a backward holding a slot on this node, if one is under way.
          double freed = std::numeric_limits<double>::infinity();
          for (const auto& [t, n] : releases)
            if (n == ps.node)
              freed = std::min(freed, t);
          if (!std::isfinite(freed))
            continue;
          start = std::max(start, freed);
        }
        if (pick == paths.size())
          pick = a, pick_start = start;
        else if (const auto& q = passes[pick][next[pick]];
                 std::tuple{start, ready[a], !ps.backward} < std::tuple{pick_start, ready[pick], !q.backward})
          pick = a, pick_start = start;
      }
    if (pick == paths.size())
      break;
    const auto& ps = passes[pick][next[pick]];
    double end = pick_start + ps.duration;
    if (ps.hold > 0) {
      if (held[ps.node] >= pr.memory && pr.memory > 0) { // it waited for the earliest slot: take it
        auto it = std::min_element(releases.begin(), releases.end(), [&](const auto& x, const auto& y) {
          return std::pair{x.second != ps.node, x.first} < std::pair{y.second != ps.node, y.first};
        });
        if (it != releases.end() && it->second == ps.node && it->first <= pick_start)
          releases.erase(it), --held[ps.node];
      }
      ++held[ps.node];
    } else if (ps.hold < 0) {
      releases.emplace_back(end, ps.node);
    }
    free_at[ps.node] = end;
    ++r.passes[ps.node];
    r.runs[pick].push_back({ps.node, pick_start, end});
    r.time = std::max(r.time, end);
    if (++next[pick] < passes[pick].size())
      ready[pick] = end + pr.delay[ps.node][passes[pick][next[pick]].node];
  }
  return r;
}

std::vector<planned_path> plan_full(const placement& p, const std::vector<path_agent>& agents) {
  std::vector<planned_path> out;
  for (const auto& a : agents) {
    auto chain = static_cast<std::size_t>(std::find(p[0].begin(), p[0].end(), a.start) - p[0].begin());
    planned_path path{a.id, {a.start}};
    for (std::size_t s = 1; s < p.size(); ++s)
      path.nodes.push_back(p[s][chain % p[s].size()]);
    out.push_back(std::move(path));
  }
  return out;
}

namespace {

/// The nodes of `from` (|from| ≥ |ends|) that continue chains ending at `ends`
/// with the least total delay: one distinct node per chain, every assignment tried.
std::vector<int> match_chains(const path_problem& pr, const std::vector<int>& ends, std::vector<int> from,
                              bool into_ends) {
  std::sort(from.begin(), from.end());
  std::vector<int> best;
  double best_cost = std::numeric_limits<double>::infinity();
  do {
    double cost = 0;
    for (std::size_t k = 0; k < ends.size(); ++k)
      cost += into_ends ? pr.delay[from[k]][ends[k]] : pr.delay[ends[k]][from[k]];
    if (cost < best_cost - 1e-12)
      best_cost = cost, best.assign(from.begin(), from.begin() + static_cast<std::ptrdiff_t>(ends.size()));
  } while (std::next_permutation(from.begin(), from.end()));
  return best;
}

} // namespace

full_pipeline plan_dtfm(const path_problem& pr, const placement& p, std::size_t microbatches) {
  std::size_t chains = p.size() > 1 ? p[1].size() : p[0].size();
  for (std::size_t s = 1; s < p.size(); ++s)
    chains = std::min(chains, p[s].size());
  // Chains start from position 1's nodes (the smallest positions fix C), take the
  // stage-0 nodes nearest them, then extend position by position.
  std::vector<std::vector<int>> chain(chains);
  std::vector<int> ends(p.size() > 1 ? p[1].begin() : p[0].begin(),
                        (p.size() > 1 ? p[1].begin() : p[0].begin()) + static_cast<std::ptrdiff_t>(chains));
  if (p.size() > 1) {
    auto starts = match_chains(pr, ends, p[0], true);
    for (std::size_t k = 0; k < chains; ++k)
      chain[k] = {starts[k], ends[k]};
    for (std::size_t s = 2; s < p.size(); ++s) {
      ends = match_chains(pr, ends, p[s], false);
      for (std::size_t k = 0; k < chains; ++k)
        chain[k].push_back(ends[k]);
    }
  } else {
    for (std::size_t k = 0; k < chains; ++k)
      chain[k] = {ends[k]};
  }
  full_pipeline out;
  std::vector<int> dealt(chains, 0);
  for (std::size_t m = 0; m < microbatches; ++m) {
    std::size_t k = m % std::max<std::size_t>(chains, 1);
    int start = chain[k].front();
    out.agents.push_back({static_cast<int>(m), start, dealt[k]++ * pr.forward[static_cast<std::size_t>(start)]});
    out.paths.push_back({static_cast<int>(m), chain[k]});
  }
  return out;
}

expected<std::vector<planned_path>> plan_random(const path_problem& pr, const placement& p, const path_rules& rules,
                                                const std::vector<path_agent>& agents, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::vector<int> later(p.size() - 1);
  std::iota(later.begin(), later.end(), 1);
  for (int round = 0; round < 1000; ++round) { // a draw that leaves a microbatch no room starts over
    std::vector<int> held(static_cast<std::size_t>(pr.nodes()), 0), served(p.size(), 0);
    std::vector<planned_path> out;
    for (const auto& a : agents) {
      const std::size_t before = out.size();
      for (int attempt = 0; attempt < 100; ++attempt) {
        std::shuffle(later.begin(), later.end(), rng);
        std::vector<int> stages(later.begin(), later.begin() + (rules.path_length - 1));
        std::sort(stages.begin(), stages.end());
        planned_path path{a.id, {a.start}};
        for (int s : stages) {
          std::vector<int> room;
          for (int n : p[s])
            if (held[n] < rules.memory)
              room.push_back(n);
          if (room.empty() || served[s] >= rules.max_per_stage)
            break;
          path.nodes.push_back(room[std::uniform_int_distribution<std::size_t>{0, room.size() - 1}(rng)]);
        }
        if (static_cast<int>(path.nodes.size()) != rules.path_length ||
            check_path(p, rules, path.nodes, a.start, pr.nodes()))
          continue;
        for (std::size_t i = 1; i < path.nodes.size(); ++i)
          ++held[path.nodes[i]], ++served[stages[i - 1]];
        out.push_back(std::move(path));
        break;
      }
      if (out.size() == before)
        break;
    }
    if (out.size() == agents.size())
      return out;
  }
  return make_sched_error("random skipping found no draw that keeps node memory and stage capacity");
}

} // namespace troupe::sched
