// `troupe sync`'s engine: replicas of a toy model in lockstep, their
// pseudo-gradients averaged through the wire format the spec names (#13).
#include "schedulers/sync_sim.hpp"

#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "schedulers/streaming_diloco.hpp"

namespace troupe::sched {

sync_sim_result run_sync_sim(const sync_sim_config& c) {
  if (c.spec.algorithm != "diloco" && c.spec.algorithm != "streaming_diloco")
    throw std::invalid_argument(fmt::format("troupe sync runs diloco and streaming_diloco; '{}' is not built yet",
                                            c.spec.algorithm));
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
  sync_sim_result out;
  out.history.resize(r_count);
  out.global.resize(r_count);
  out.bytes_sent.assign(r_count, 0);
  auto record_global = [&](int step) {
    for (std::size_t r = 0; r < r_count; ++r)
      for (int f = 0; f < p; ++f)
        out.global[r][step].push_back(policy[r].global(f).front());
  };
  record_global(0);
  std::map<int, std::vector<float>> in_flight;  // fragment -> the averaged pseudo-gradient on its way
  for (int step = 0; step < c.steps; ++step) {
    for (std::size_t r = 0; r < r_count; ++r) {
      auto& h = out.history[r].emplace_back();
      for (const auto& frag : weights[r])
        h.push_back(frag.front());
    }
    for (auto& w : weights)
      for (auto& frag : w)
        for (auto& v : frag)
          v -= c.inner_lr * c.grad;
    std::vector<std::vector<fragment_event>> events;
    for (auto& pol : policy)
      events.push_back(pol.after_inner_step());
    bool performed = false;
    for (std::size_t k = 0; k < events.front().size(); ++k) {
      auto ev = events.front()[k];  // every replica keeps the same schedule
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
