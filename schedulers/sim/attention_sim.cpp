// Core attention under the simulated clock: a round priced from its documents,
// colocated or balanced over in-place servers (#16).
#include "schedulers/sim/attention_sim.hpp"

#include <algorithm>
#include <numeric>

namespace troupe::sched {

attention_costs attention_costs_of(const transformer_shape& m, const cost_settings& s, const link_spec& link) {
  const auto& d = s.device;
  const double t = s.tensor_parallel, peak = d.peak(s.dtype), h = m.hidden;
  const double value = s.dtype == "f32" ? 4.0 : 2.0;
  attention_costs c;
  // Per token: the 24·h² of QKV, projection and MLP; the memory-bound ops'
  // h·(10 + 24/t) bytes (Korthikanti et al. 2022 without the s² scores flash
  // attention never stores); the tensor-parallel all-reduces spread over the tokens.
  const double tokens = static_cast<double>(m.microbatch) * m.sequence;
  c.linear = 24 * h * h / t / (peak * d.efficiency.matmul) +
             h * (10 + 24.0 / t) / (d.memory_bandwidth * d.efficiency.elementwise) +
             2 * tensor_parallel_allreduce(m, s) / std::max(tokens, 1.0);
  c.pair = 4 * h / t / (peak * d.efficiency.attention);
  c.query_bytes = 2 * h / t * value; // q there, the output back
  c.kv_bytes = 2 * h / t * value;    // k and v
  c.backward_ratio = d.backward_ratio;
  c.link = link;
  return c;
}

namespace {

/// Moved bytes in and out of each server for one nano-batch's plan (real bytes:
/// the plan counts them in the costs' units).
std::vector<double> bytes_by_server(const attention_plan& plan, std::size_t servers) {
  std::vector<double> out(servers, 0.0);
  for (const auto& mv : plan.moves) {
    out[static_cast<std::size_t>(mv.from)] += mv.bytes;
    out[static_cast<std::size_t>(mv.to)] += mv.bytes;
  }
  return out;
}

} // namespace

round_time price_round(const round_documents& docs, const attention_costs& c, bool in_place, double tolerance) {
  const std::size_t replicas = docs.size(), nanos = docs.empty() ? 0 : docs.front().size();
  round_time out;
  out.before.assign(replicas, 0);
  out.after.assign(replicas, 0);
  // Per replica and nano-batch: tokens, and the pairs it computes (its own, or the plan's share).
  std::vector<std::vector<double>> tokens(replicas, std::vector<double>(nanos, 0.0));
  std::vector<std::vector<double>> pairs = tokens, moved = tokens;
  for (std::size_t r = 0; r < replicas; ++r)
    for (std::size_t k = 0; k < nanos; ++k)
      for (auto len : docs[r][k]) {
        tokens[r][k] += static_cast<double>(len);
        out.before[r] += causal_pairs(len, len);
        pairs[r][k] += static_cast<double>(causal_pairs(len, len));
      }
  if (!in_place) {
    out.after = out.before;
  } else {
    attention_plan_options opts;
    opts.servers = static_cast<int>(replicas);
    opts.tolerance = tolerance;
    opts.query_bytes = c.query_bytes, opts.kv_bytes = c.kv_bytes;
    for (std::size_t k = 0; k < nanos; ++k) {
      std::vector<attention_document> nano;
      for (std::size_t r = 0; r < replicas; ++r)
        for (auto len : docs[r][k])
          if (len > 0)
            nano.push_back({len, static_cast<int>(r)});
      if (nano.empty())
        continue;
      auto plan = plan_attention(nano, opts);
      out.worst_after = std::max(out.worst_after, plan.imbalance_after());
      out.bytes += plan.bytes;
      auto b = bytes_by_server(plan, replicas);
      for (std::size_t r = 0; r < replicas; ++r) {
        out.after[r] += plan.after[r];
        pairs[r][k] = static_cast<double>(plan.after[r]);
        moved[r][k] = b[r];
      }
    }
  }
  // One pass (forward, or backward with its compute and bytes scaled) on every server.
  auto pass = [&](double compute_scale, double bytes_scale) {
    std::vector<double> t(replicas, 0.0);
    for (std::size_t r = 0; r < replicas; ++r) {
      std::vector<double> work(nanos);
      for (std::size_t k = 0; k < nanos; ++k)
        work[k] = compute_scale * (tokens[r][k] * c.linear + pairs[r][k] * c.pair);
      const double all = std::accumulate(work.begin(), work.end(), 0.0);
      t[r] = all;
      for (std::size_t k = 0; k < nanos; ++k)
        if (moved[r][k] > 0) // hidden behind the other nano-batches' work (ping-pong)
          t[r] += std::max(0.0, c.link.time(bytes_scale * moved[r][k]) - (all - work[k]));
    }
    if (in_place) // every replica needs answers from the servers: the slowest sets the round
      std::fill(t.begin(), t.end(), *std::max_element(t.begin(), t.end()));
    return t;
  };
  out.forward = pass(1.0, 1.0);
  out.backward = pass(c.backward_ratio, 2.0);
  return out;
}

} // namespace troupe::sched
