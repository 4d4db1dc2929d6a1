// `troupe sync`'s engine: the chosen method's toy run (sync_method::toy), each
// method's replicas of a toy model in lockstep (#13).
#include "schedulers/sim/sync_sim.hpp"

#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "schedulers/sync/sync_policy.hpp"

namespace troupe::sched {

sync_sim_result toy_result(std::size_t replicas) {
  sync_sim_result out;
  out.history.resize(replicas);
  out.global.resize(replicas);
  out.bytes_sent.assign(replicas, 0);
  return out;
}

std::vector<std::string> toy_method_names() {
  std::vector<std::string> out;
  for (const auto& name : sync_method_names())
    if (const auto* m = find_sync_method(name); m && m->toy)
      out.push_back(name);
  return out;
}

sync_sim_result run_sync_sim(const sync_sim_config& c) {
  const auto* m = find_sync_method(c.spec.algorithm);
  if (!m || !m->toy)
    throw std::invalid_argument(fmt::format("troupe sync runs {}; '{}' has no toy run yet",
                                            fmt::join(toy_method_names(), ", "), c.spec.algorithm));
  return m->toy(c);
}

} // namespace troupe::sched
