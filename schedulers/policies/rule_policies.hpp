// The built-in stage policies as rules over one stage's local state (what is
// ready, in flight and deferred) and the priorities actions carry: gpipe, 1f1b,
// interleaved_1f1b and zb_h1. None holds an order list; the order emerges.
#pragma once

#include <vector>

#include "schedulers/policies/stage_policy.hpp"

namespace troupe::sched {

/// GPipe: the ready forward with the lowest microbatch first; a ready backward
/// (lowest microbatch) only when no forward is ready or `max_in_flight` is reached.
expected<policy_ptr> make_gpipe(const policy_params& params);

/// 1F1B: a ready forward of a microbatch already held here (SkipPipe's head on
/// stage 0) first; then the ready forward with the lowest microbatch while fewer
/// than its hops_left (p - r on a chain) held microbatches are as close to their
/// routes' ends, or fewer than `max_in_flight` are held; otherwise, on a chain,
/// nothing while the bound has room and the step's plan says a forward is still
/// to come; otherwise a ready backward. More than one chunk only on paths.
expected<policy_ptr> make_one_f_one_b(const policy_params& params);

/// Interleaved 1F1B over v chunks: a ready forward while in flight <
/// (p - r - 1)*2 + (v - 1)*p + 1 (Megatron's warm-up plus one), by the key
/// (mb div p, chunk, mb); otherwise, unless a forward is still to come and the
/// bound has room, a ready backward by (mb div p, -chunk, mb).
/// Routed across replicas (policy_params::routed), a microbatch's first chunk
/// starts only when the rank has room for all its chunks besides those it has
/// reserved; later chunks then always have a slot, and no backward is held.
expected<policy_ptr> make_interleaved_1f1b(const policy_params& params);

/// The interleaved rule's in-flight bound at `params.rank`: max_in_flight, or Megatron's warm-up plus one.
expected<int> interleaved_bound(const policy_params& params);

/// ZB-H1: a ready forward while in flight < hops_left (p - r on a chain);
/// otherwise, while a forward is still to come and the bound has room, a due W
/// (hop_index + 1, r + 1 on a chain, are deferred: the next I needs one first)
/// or nothing; otherwise a ready I unless hop_index + 1 W passes are deferred,
/// then a W first. A deferred W also runs when only W is left.
expected<policy_ptr> make_zb_h1(const policy_params& params);

/// The options the rule policies read: `max_in_flight` (all four) and
/// `max_deferred_weight` (when `split`, zb_h1).
std::vector<policy_option> rule_options(bool split);

} // namespace troupe::sched
