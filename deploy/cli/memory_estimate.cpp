// Estimating a graph's memory from the graph alone (deploy/cli/memory_estimate.hpp).
#include "deploy/cli/memory_estimate.hpp"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "actors/zero_shard_state.hpp"
#include "deploy/run/model_size.hpp"

namespace troupe {

namespace {

constexpr std::int64_t f32 = 4;

/// Layers `a` holds, and whether it holds the last one (the head and its logits).
std::pair<std::int64_t, bool> layers_of(const graph_spec& g, const actor_spec& a) {
  std::int64_t n = 0;
  bool head = false;
  for (const auto& r : a.layers)
    n += r.end - r.begin, head |= r.end == g.model.layers;
  return {n, head};
}

} // namespace

std::vector<actor_memory> estimate_memory(const graph_spec& g) {
  auto params = count_parameters(g);
  const auto& m = g.model;
  // 1F1B and its kin keep at most `stages` microbatches in flight on a stage; GPipe all of them.
  int bound = std::max(g.pipeline.stages, 1) * std::max(g.pipeline.virtual_stages, 1);
  int in_flight = g.pipeline.schedule == "gpipe" ? g.pipeline.microbatches : std::min(g.pipeline.microbatches, bound);
  double s = m.context, b = g.data.batch, h = m.d_model, heads = m.heads;
  double per_layer = 2 * (34 * s * b * h + 5 * heads * s * s * b); // bytes, f32
  bool zero = g.data_parallel.zero > 0 && g.data_parallel.replicas > 1;
  std::vector<actor_memory> out;
  for (const auto& a : g.actors) {
    if (!a.role.holds_layers)
      continue;
    actor_memory e{a.name};
    std::int64_t p = 0;
    for (const auto& [name, n] : params.per_actor)
      if (name == a.name)
        p = n;
    auto held = zero ? predict_held(g, a) : zero_prediction{};
    // Parameters, gradients and AdamW's two moments; with ZeRO as the shards split them.
    e.state = zero ? held.stage.params + held.stage.grads + held.stage.optimizer : f32 * p * 4;
    auto [layers, head] = layers_of(g, a);
    double act = per_layer * static_cast<double>(layers) + (head ? 2.0 * f32 * s * b * m.vocab : 0.0);
    e.in_flight = in_flight;
    e.host = a.device.empty() || a.device == "cpu";
    e.activations = static_cast<std::int64_t>(std::min(act * in_flight, 9.0e18));
    out.push_back(e);
    if (zero)
      out.push_back({a.name + "_os", held.shard.params + held.shard.grads + held.shard.optimizer, 0, 0});
  }
  return out;
}

std::int64_t machine_memory() {
  long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<std::int64_t>(pages) * size : 0;
}

std::optional<std::string> memory_problem(const graph_spec& g, std::int64_t available) {
  auto all = estimate_memory(g);
  std::erase_if(all, [](const actor_memory& e) { return !e.host; }); // device memory is not checked here
  if (all.empty() || available <= 0)
    return std::nullopt;
  double total = 0;
  for (const auto& e : all)
    total += static_cast<double>(e.total());
  auto nodes = g.cluster.present ? std::max(g.cluster.nodes, 1) : 1;
  double per_process = total / nodes;
  if (per_process <= static_cast<double>(available))
    return std::nullopt;
  const auto& big =
    *std::max_element(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.total() < y.total(); });
  constexpr double gb = 1e9;
  return fmt::format(
    "the graph needs an estimated {:.1f} GB of memory{}, more than this machine's {:.1f} GB; the "
    "largest actor, {}, {:.1f} GB of parameters, gradients and optimizer state and {:.1f} GB of "
    "activations for {} in flight (a smaller model, batch or context, or more stages)",
    per_process / gb, nodes > 1 ? fmt::format(" per node ({} nodes)", nodes) : "", static_cast<double>(available) / gb,
    big.actor, static_cast<double>(big.state) / gb, static_cast<double>(big.activations) / gb,
    big.in_flight == 1 ? std::string{"one microbatch"} : fmt::format("{} microbatches", big.in_flight));
}

} // namespace troupe
