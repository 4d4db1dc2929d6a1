// `troupe sync`'s engine: replicas of a toy model in lockstep, their
// pseudo-gradients averaged through the wire format the spec names (#13).
#include "schedulers/sim/sync_sim.hpp"

#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "schedulers/sync/noloco.hpp"
#include "schedulers/sync/streaming_diloco.hpp"

namespace troupe::sched {

namespace {

sync_sim_result empty_result(std::size_t replicas) {
  sync_sim_result out;
  out.history.resize(replicas);
  out.global.resize(replicas);
  out.bytes_sent.assign(replicas, 0);
  return out;
}

/// NoLoCo on the toy model: fast and slow weights per replica, and every H steps
/// an outer step within each group of the step's partition (schedulers/sync/noloco.hpp).
sync_sim_result run_noloco(const sync_sim_config& c) {
  auto n = static_cast<std::size_t>(c.values);
  auto r_count = static_cast<std::size_t>(c.replicas);
  std::vector<std::vector<float>> fast(r_count, std::vector<float>(n, c.start)),
    slow = fast, momentum(r_count, std::vector<float>(n, 0.0f));
  auto out = empty_result(r_count);
  auto record_slow = [&](int step) {
    for (std::size_t r = 0; r < r_count; ++r)
      out.global[r][step] = {slow[r].front()};
  };
  record_slow(0);
  for (int step = 0; step < c.steps; ++step) {
    for (std::size_t r = 0; r < r_count; ++r)
      out.history[r].push_back({fast[r].front()});
    for (std::size_t r = 0; r < r_count; ++r)
      for (auto& v : fast[r])
        v -= c.inner_lr * c.grad_for(static_cast<int>(r));
    if ((step + 1) % c.spec.sync_every != 0)
      continue;
    auto groups = noloco_groups(c.replicas, c.spec.group, step + 1, c.seed);
    auto fast_before = fast, slow_before = slow; // every member reads the values as they were sent
    for (const auto& g : groups) {
      std::vector<std::span<const float>> f, s;
      for (int m : g)
        f.emplace_back(fast_before[static_cast<std::size_t>(m)]),
          s.emplace_back(slow_before[static_cast<std::size_t>(m)]);
      for (int m : g) {
        auto i = static_cast<std::size_t>(m);
        noloco_outer_step(f, s, momentum[i], slow[i], fast[i], c.spec.outer.lr, c.spec.outer.momentum);
        // It sent its fast and slow weights to each other member of its group, and no one else.
        out.bytes_sent[i] +=
          static_cast<std::int64_t>(2 * n * sizeof(float)) * (static_cast<std::int64_t>(g.size()) - 1);
      }
    }
    out.groups[step + 1] = std::move(groups);
    ++out.exchanges;
    if (step + 1 < c.steps)
      record_slow(step + 1);
  }
  return out;
}

} // namespace

sync_sim_result run_sync_sim(const sync_sim_config& c) {
  if (c.spec.algorithm == "noloco") {
    if (c.replicas < 1 || c.values < 1 || c.steps < 0 || c.spec.sync_every < 1)
      throw std::invalid_argument("run_sync_sim: replicas, values and sync_every must be at least 1");
    return run_noloco(c);
  }
  if (c.spec.algorithm != "diloco" && c.spec.algorithm != "streaming_diloco")
    throw std::invalid_argument(
      fmt::format("troupe sync runs diloco, streaming_diloco and noloco; '{}' is not built yet", c.spec.algorithm));
  if (c.replicas < 1 || c.values < 1 || c.steps < 0)
    throw std::invalid_argument("run_sync_sim: replicas and values must be at least 1, steps at least 0");
  auto format = parse_wire_format(c.spec.quantize);
  if (!format)
    throw std::invalid_argument(fmt::format("run_sync_sim: unknown quantize '{}'", c.spec.quantize));
  int p = c.spec.algorithm == "streaming_diloco" ? c.spec.fragments : 1;
  auto r_count = static_cast<std::size_t>(c.replicas);
  std::vector<std::vector<std::vector<float>>> weights(
    r_count, std::vector<std::vector<float>>(static_cast<std::size_t>(p),
                                             std::vector<float>(static_cast<std::size_t>(c.values), c.start)));
  std::vector<streaming_diloco> policy;
  for (std::size_t r = 0; r < r_count; ++r)
    policy.emplace_back(c.spec, weights[r]);
  auto out = empty_result(r_count);
  auto record_global = [&](int step) {
    for (std::size_t r = 0; r < r_count; ++r)
      for (int f = 0; f < p; ++f)
        out.global[r][step].push_back(policy[r].global(f).front());
  };
  record_global(0);
  std::map<int, std::vector<float>> in_flight; // fragment -> the averaged pseudo-gradient on its way
  for (int step = 0; step < c.steps; ++step) {
    for (std::size_t r = 0; r < r_count; ++r) {
      auto& h = out.history[r].emplace_back();
      for (const auto& frag : weights[r])
        h.push_back(frag.front());
    }
    for (std::size_t r = 0; r < r_count; ++r)
      for (auto& frag : weights[r])
        for (auto& v : frag)
          v -= c.inner_lr * c.grad_for(static_cast<int>(r));
    std::vector<std::vector<fragment_event>> events;
    for (auto& pol : policy)
      events.push_back(pol.after_inner_step());
    bool performed = false;
    for (std::size_t k = 0; k < events.front().size(); ++k) {
      auto ev = events.front()[k]; // every replica keeps the same schedule
      auto f = static_cast<std::size_t>(ev.fragment);
      if (ev.what == fragment_event::kind::prepare) {
        std::vector<quantized_rows> parts;
        for (std::size_t r = 0; r < r_count; ++r) {
          parts.push_back(quantize_rows(policy[r].prepare(ev.fragment, weights[r][f]), c.values, *format));
          out.bytes_sent[r] += static_cast<std::int64_t>(parts.back().wire_bytes());
        }
        in_flight[ev.fragment] = reduce_mean(parts);
      } else {
        auto avg = in_flight.extract(ev.fragment);
        if (avg.empty())
          throw std::logic_error(fmt::format("fragment {} performed before it was prepared", ev.fragment));
        for (std::size_t r = 0; r < r_count; ++r)
          policy[r].perform(ev.fragment, avg.mapped(), weights[r][f]);
        performed = true;
      }
    }
    if (performed && step + 1 < c.steps)
      record_global(step + 1);
  }
  out.exchanges = policy.front().exchanges();
  return out;
}

} // namespace troupe::sched
