// A sync policy run deterministically on a toy model: every replica's weights
// before every inner step, as torchft's mocked DiLoCo regression test records
// them (#13; what `troupe sync` prints).
#pragma once

#include <string>
#include <vector>

#include "schedulers/sync/sync_toy.hpp"

namespace troupe::sched {

/// Runs `c` with its method's toy run (sync_method::toy). Throws
/// std::invalid_argument on a method without one or a configuration it refuses.
sync_sim_result run_sync_sim(const sync_sim_config& c);
/// The registered methods that have a toy run, in registration order.
std::vector<std::string> toy_method_names();

} // namespace troupe::sched
