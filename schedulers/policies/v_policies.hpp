// The V-shaped stage policies as rules: zbv (Qi et al. 2023, "Zero Bubble
// Pipeline Parallelism", ZB-V), v_half and v_min (Qi et al. 2024, "Pipeline
// Parallelism with Controllable Memory"). Two chunks per rank placed in a V.
#pragma once

#include <vector>

#include "schedulers/policies/stage_policy.hpp"

namespace troupe::sched {

/// ZB-V: backward split into I and W, at most 2p chunk activations per rank
/// (p microbatches' worth, 1F1B's), W filling what would be idle.
expected<policy_ptr> make_zbv(const policy_params& params);

/// V-Half: the V rule within (p + 2) // 2 microbatches' worth of activations per rank.
expected<policy_ptr> make_v_half(const policy_params& params);

/// V-Min: the V rule within (p + 4) // 3 microbatches' worth of activations per rank.
expected<policy_ptr> make_v_min(const policy_params& params);

/// DualPipeV (DeepSeek 2025): two chunks per rank in a V, a forward of one
/// chunk fused with a backward of the other (one F&B action) wherever the rank
/// holds both, 2p chunk activations between actions (2p + 1 during an F&B).
/// Needs at least 2p microbatches per step (refused when params.microbatches says fewer).
expected<policy_ptr> make_dualpipev(const policy_params& params);

/// The options the V policies read: `max_in_flight` and `max_deferred_weight`.
std::vector<policy_option> v_options();

} // namespace troupe::sched
