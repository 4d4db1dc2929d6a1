// `troupe sim` with core attention from documents: per step, long-tail lengths
// laid end to end and cut into windows as the data loader cuts them, dealt to
// the replicas round by round, each round priced colocated and in place
// (schedulers/sim/attention_sim.hpp), and the cluster driver run with those costs.
#include "deploy/cli/sim_attention.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/documents.hpp"
#include "deploy/cli/commands.hpp"
#include "schedulers/sim/attention_sim.hpp"

namespace troupe::cli {

using namespace troupe::sched;

bool simulates_attention(const graph_spec& g) {
  return g.attention.present || g.data.documents == "long_tail";
}

namespace {

/// Rounds of a step: [round][replica][nano-batch] -> document pieces.
using step_documents = std::vector<round_documents>;

/// Step `step`'s documents as the data loader reads them: windows of `context`
/// tokens over the lengths laid end to end (a longer document is cut), round j
/// giving replica r its `batch` windows (j·R + r)·batch + i, or with
/// heaviest_first the round's windows sorted by pairs, the heaviest to replica 0.
step_documents draw_step(const graph_spec& g, int replicas, int microbatches, int nanos, std::int64_t step) {
  const int T = g.model.context, B = g.data.batch;
  const auto windows = static_cast<std::size_t>(replicas) * microbatches * B;
  std::vector<std::vector<std::int64_t>> pieces(windows);
  if (g.data.documents == "long_tail") {
    auto lengths = document_lengths_long_tail(windows * T, T, g.data.seed + static_cast<std::uint64_t>(step));
    std::size_t at = 0;
    for (auto len : lengths) {
      for (std::size_t left = len; left > 0;) {
        std::size_t w = at / T, room = (w + 1) * T - at, take = std::min(left, room);
        pieces[w].push_back(static_cast<std::int64_t>(take));
        at += take, left -= take;
      }
    }
  } else {
    for (auto& w : pieces)
      w.push_back(T); // one causal window each
  }
  auto pairs = [](const std::vector<std::int64_t>& w) {
    std::int64_t p = 0;
    for (auto len : w)
      p += causal_pairs(len, len);
    return p;
  };
  step_documents out(static_cast<std::size_t>(microbatches),
                     round_documents(static_cast<std::size_t>(replicas),
                                     std::vector<std::vector<std::int64_t>>(static_cast<std::size_t>(nanos))));
  for (int j = 0; j < microbatches; ++j) {
    std::vector<std::size_t> rows(static_cast<std::size_t>(replicas) * B);
    std::iota(rows.begin(), rows.end(), static_cast<std::size_t>(j) * replicas * B);
    if (g.data.deal == "heaviest_first")
      std::stable_sort(rows.begin(), rows.end(), [&](auto a, auto b) { return pairs(pieces[a]) > pairs(pieces[b]); });
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto r = i / B, row = i % B, nano = row * nanos / B;
      auto& to = out[static_cast<std::size_t>(j)][r][nano];
      to.insert(to.end(), pieces[rows[i]].begin(), pieces[rows[i]].end());
    }
  }
  return out;
}

/// One way of running attention, over the whole run.
struct attention_run {
  std::vector<std::vector<round_time>> rounds; ///< [step][round]
  cluster_result sim;
};

/// Max / average of per-server pairs summed over the run.
double imbalance(const std::vector<std::vector<round_time>>& rounds, bool after) {
  std::vector<double> load;
  for (const auto& step : rounds)
    for (const auto& r : step) {
      const auto& v = after ? r.after : r.before;
      load.resize(v.size(), 0.0);
      for (std::size_t i = 0; i < v.size(); ++i)
        load[i] += static_cast<double>(v[i]);
    }
  double sum = std::accumulate(load.begin(), load.end(), 0.0);
  return sum > 0 ? *std::max_element(load.begin(), load.end()) / (sum / static_cast<double>(load.size())) : 1.0;
}

expected<attention_run> run(const graph_spec& g, const cluster_config& base, const std::vector<step_documents>& docs,
                            bool in_place) {
  const auto& cs = base.costs;
  const auto t = cs.tensor_parallel;
  const int d = base.replicas;
  // The link between the replicas of a position (their devices are d apart: the widest level).
  const auto& link = cs.network.between(0, static_cast<std::int64_t>(d - 1) * t);
  const auto costs = attention_costs_of(base.model, cs, link);
  attention_run out;
  for (const auto& step : docs) {
    out.rounds.emplace_back();
    for (const auto& round : step)
      out.rounds.back().push_back(price_round(round, costs, in_place, g.attention.tolerance));
  }
  // The cost model's layer, to take out of each action and put the documents' in.
  const auto nominal = costs_of(base.model, cs, 1, false);
  cluster_config c = base;
  c.action_cost = [&out, &c, nominal, recompute = cs.recompute](int replica, int position, std::int64_t step,
                                                                int microbatch, char kind, double cost) {
    const auto& st = c.stages[static_cast<std::size_t>(position)];
    int layers = 0;
    for (auto [b, e] : st.chunks)
      layers += e - b;
    layers /= static_cast<int>(st.chunks.size()); // the chunk's (chunks are equal)
    const auto& r = out.rounds[static_cast<std::size_t>(step)][static_cast<std::size_t>(microbatch)];
    const double fwd = r.forward[static_cast<std::size_t>(replica)];
    const double bwd = r.backward[static_cast<std::size_t>(replica)] + (recompute ? fwd : 0.0);
    switch (kind) {
    case 'F':
      return cost + layers * (fwd - nominal.forward);
    case 'B':
      return cost + layers * (bwd - nominal.backward);
    default:
      return cost * bwd / nominal.backward; // I or W: their share of the backward
    }
  };
  auto r = simulate_cluster(c);
  if (!r)
    return r.error();
  out.sim = std::move(*r);
  return out;
}

} // namespace

int simulate_attention(const std::string& file, const graph_spec& g, const cluster_config& base, bool json) {
  auto fail = [&](const std::string& why) {
    fmt::print(stderr, "troupe sim: {}: {}\n", file, why);
    return static_cast<int>(bad_input);
  };
  if (g.attention.present && g.attention.servers != 0)
    return fail(fmt::format("attention.servers {}: troupe sim models attention servers in place (every stage "
                            "serving its position's replicas) for now; set attention.servers: in_place",
                            g.attention.servers));
  if (g.data.documents != "long_tail" && g.data.documents != "none")
    return fail(fmt::format("data.documents '{}' needs the corpus; troupe sim draws long_tail documents or takes "
                            "each window as one (none)",
                            g.data.documents));
  const int nanos = g.attention.present ? g.attention.nano_batches : 1;
  auto wall = std::chrono::steady_clock::now();
  std::vector<step_documents> docs;
  for (std::int64_t s = 0; s < base.steps; ++s)
    docs.push_back(draw_step(g, base.replicas, base.microbatches, nanos, s));
  auto colocated = run(g, base, docs, false);
  if (!colocated)
    return fail(colocated.error().message);
  std::optional<attention_run> in_place;
  if (g.attention.present) {
    auto r = run(g, base, docs, true);
    if (!r)
      return fail(r.error().message);
    in_place = std::move(*r);
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  const auto& main = in_place ? *in_place : *colocated;
  double worst = 1, bytes = 0;
  for (const auto& step : main.rounds)
    for (const auto& r : step)
      worst = std::max(worst, r.worst_after), bytes += r.bytes;
  const double before = imbalance(main.rounds, false), after = imbalance(main.rounds, true);
  const double speedup = in_place ? colocated->sim.iteration_s / in_place->sim.iteration_s : 1.0;
  const std::int64_t devices = main.sim.devices;
  if (json) {
    nlohmann::json a{{"servers", in_place ? "in_place" : "colocated"},
                     {"documents", g.data.documents},
                     {"deal", g.data.deal},
                     {"nano_batches", nanos},
                     {"tolerance", g.attention.tolerance},
                     {"imbalance_before", before},
                     {"imbalance_after", after},
                     {"worst_nano_batch_after", worst},
                     {"moved_gb_per_layer_per_step", bytes / 1e9 / static_cast<double>(base.steps)},
                     {"colocated_iteration_s", colocated->sim.iteration_s},
                     {"speedup", speedup}};
    if (in_place)
      a["in_place_iteration_s"] = in_place->sim.iteration_s;
    nlohmann::json out{{"attention", a},
                       {"devices", devices},
                       {"stages", base.stages.size()},
                       {"replicas", base.replicas},
                       {"iteration_s", main.sim.iteration_s},
                       {"tokens_per_s", main.sim.tokens_per_s()},
                       {"bubble", main.sim.bubble_fraction},
                       {"wall_s", wall_s}};
    fmt::print("{}\n", out.dump(2));
    return ok;
  }
  const auto& m = base.model;
  fmt::print("troupe sim: {}: {} stages x {} replicas x {} tensor-parallel = {} devices ({}), schedule {}, {} "
             "microbatches of {} x {} tokens per replica, documents {}, deal {}\n",
             file, base.stages.size(), base.replicas, base.costs.tensor_parallel, devices, base.costs.device.name,
             base.policy, base.microbatches, m.microbatch, m.sequence, g.data.documents, g.data.deal);
  fmt::print("core attention by causal pairs (flash attention), the rest of a layer by tokens\n");
  if (in_place)
    fmt::print("attention servers in place ({} per position), {} nano-batches, tolerance {}\n", base.replicas, nanos,
               g.attention.tolerance);
  fmt::print("attention pairs per replica over the run, max/avg: {:.3f} colocated", before);
  if (in_place)
    fmt::print(", {:.3f} in place (worst nano-batch plan {:.3f}); {:.3g} GB moved per layer per step", after, worst,
               bytes / 1e9 / static_cast<double>(base.steps));
  fmt::print("\niteration: colocated {:.4g} s", colocated->sim.iteration_s);
  if (in_place)
    fmt::print(", in place {:.4g} s: {:.2f}x", in_place->sim.iteration_s, speedup);
  fmt::print(" ({:.4g} tokens/s)\nsimulation: {:.3f} s\n", main.sim.tokens_per_s(), wall_s);
  return ok;
}

} // namespace troupe::cli
