// `troupe sim` on a graph with a `local_update:` section (#13, #25): the
// method, its replica groups, each stage's parameter tensors (what fragments
// cut) and the emulated links between the outer_sync actors, as a run has them;
// the data-parallel ring's buckets and links; and what else of a run's
// placement the simulated clock prices.
#pragma once

#include "runtime/graph/graph_spec.hpp"
#include "schedulers/sim/cluster_sim.hpp"

namespace troupe::cli {

/// Sets what else of a run of `g` the plain simulation prices (not a skip: or
/// attention graph's): `c.ring` from its data_parallel section (the buckets
/// its stages cut, ZeRO, the ring channels' links), `c.outer` from its
/// local_update section (nothing without one), `c.nodes` from its cluster (the node process of every stage
/// actor) and `c.slowdown` from its stages' `slowdown:`.
void set_run_sections(const graph_spec& g, sched::cluster_config& c);

} // namespace troupe::cli
