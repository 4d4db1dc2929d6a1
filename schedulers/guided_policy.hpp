// A stage policy that prefers a schedule's published order but lets ready work
// run when the preferred action is late: the engine behind 1f1b, interleaved_1f1b,
// zb_h1, gpipe and (with no look-ahead) table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedulers/stage_policy.hpp"

namespace troupe::sched {

/// How far a guided policy may stray from its preferred order.
struct guided_rules {
  /// Most activations held at once (stage_queue::in_flight()); 0 = unbounded.
  int in_flight_limit = 0;
  /// Most deferred W passes held at once (split backward only); 0 = unbounded.
  int deferred_weight_limit = 0;
  /// How many not-yet-started actions past the preferred one may run instead of
  /// it while it is not ready; 0 replays the order strictly.
  int look_ahead = 0;
  /// Only let an action overtake the preferred one if it is of the same kind
  /// (GPipe keeps its phases: all forwards, then all backwards).
  bool same_kind_only = false;
  /// Never let a forward overtake a preferred backward (or I): the backward
  /// frees memory and unblocks upstream ranks.
  bool forward_never_overtakes_backward = true;
};

/// Follows `order` (one rank's actions for one step), work-conserving within `rules`.
///
/// next() returns the first not-started action of the order if it is ready
/// and within the memory bounds; otherwise the first of the next
/// `rules.look_ahead` not-started actions that is ready, within the bounds and
/// allowed to overtake; otherwise it waits. Under equal costs the ready checks
/// never fire out of order and the published order comes out exactly.
class guided_policy : public stage_policy {
public:
  guided_policy(std::string name, std::vector<action> order, guided_rules rules, bool split_backward);

  std::string_view name() const override { return name_; }
  bool splits_backward() const override { return split_; }
  int in_flight_limit() const override { return rules_.in_flight_limit; }
  std::optional<action> next(const stage_queue& queue) override;
  std::vector<action> canonical_order() const override { return order_; }
  const guided_rules& rules() const { return rules_; }

private:
  bool admissible(const stage_queue& q, const action& a) const;

  std::string name_;
  std::vector<action> order_;
  guided_rules rules_;
  bool split_;
  std::size_t cursor_ = 0;  // every action before it has started
  std::uint64_t step_ = 0;
};

} // namespace troupe::sched
