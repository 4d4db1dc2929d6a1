// NoLoCo's sync policy as plain code (Kolehmainen et al. 2025, arXiv
// 2506.10911; reference code jkolehm/noloco): the groups of each exchange, the
// random routes between pipeline stages, and the outer step of one group (#13).
// No collective: every replica derives the same groups and routes by itself.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "schedulers/routing/routing_policy.hpp"

namespace troupe::sched {

/// The groups of the exchange after inner step `step`: a permutation of the
/// replicas from a generator seeded by (`seed`, `step`), element i going to
/// group i mod (replicas / group) (the reference code's strided slices), each
/// group sorted. The same on every replica; `replicas` must divide by `group`.
std::vector<std::vector<int>> noloco_groups(int replicas, int group, std::int64_t step, std::uint64_t seed);

/// Where each replica's activation of microbatch `sequence` goes at stage
/// boundary `boundary` (between positions b and b + 1): `route[r]` is the replica
/// of the next stage, a bijection seeded by (`seed`, `sequence`, `boundary`)
/// (the reference's `dipaco_pipeline.py` permutes per sample and boundary). The
/// gradient returns the same way.
std::vector<int> noloco_route(int replicas, int boundary, std::int64_t sequence, std::uint64_t seed);

/// NoLoCo's `route: random` as a routing policy (registered as `noloco`): the
/// step's j-th microbatch of replica r starts on r's first stage; at each
/// boundary b it moves from replica ρ to replica noloco_route(R, b, key, seed)[ρ],
/// key = the run's j-th round of microbatches (`sequence` / R), so the j-th
/// microbatches of all replicas take one bijection per boundary and every stage
/// gets as many microbatches as its own chain would give it. The gradient
/// returns along the same route. `options["seed"]` seeds it (data.seed).
/// Stages holding several chunks (interleaved): the random bijections pick the
/// replica of each position on the first chunk's way; a later chunk returns to
/// the replica of its position that ran the earlier one, so every rank sees the
/// later chunks of exactly the microbatches whose first chunk it ran.
expected<routing_ptr> make_noloco_routing(const routing_params& p);

/// NoLoCo's outer step for one replica i of a group, per value (the reference
/// code's `SparseOptimizerC`, as REFERENCES.md gives it): with θ the fast
/// (local) weights, φ the slow ones and m the momentum,
/// `m ← μ·m + lr·mean_g(θ − φ) + lr·(mean_g(φ) − φ_i)`; `φ_i ← φ_i + m`; `θ_i ← φ_i`.
/// `fast` and `slow` hold the group's values (member-major, this replica's
/// among them at `self`); `momentum`, `slow_i` and `fast_i` are this replica's.
void noloco_outer_step(const std::vector<std::span<const float>>& fast, const std::vector<std::span<const float>>& slow,
                       std::span<float> momentum, std::span<float> slow_i, std::span<float> fast_i, double lr,
                       double mu);

} // namespace troupe::sched
