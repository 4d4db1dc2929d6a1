// `troupe sim` with core attention priced from documents (#16, DistCA #15):
// each replica's long-tail documents drawn per step, attention colocated on its
// replica or balanced over in-place attention servers, the two compared.
#pragma once

#include <string>

#include "runtime/graph/graph_spec.hpp"
#include "schedulers/sim/cluster_sim.hpp"

namespace troupe::cli {

/// Whether `troupe sim` prices a graph's core attention by its documents: it has
/// an `attention:` section, or data.documents draws them (long_tail).
bool simulates_attention(const graph_spec& g);

/// Simulates `base` (the graph's cluster, as `troupe sim` reads it) with each
/// microbatch's attention from its documents: colocated, and with `attention:`
/// in place too; prints the balance and the speedup. The exit code.
int simulate_attention(const std::string& file, const graph_spec& g, const sched::cluster_config& base, bool json);

} // namespace troupe::cli
