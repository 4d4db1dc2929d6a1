// A stage policy that prefers a schedule's published order but lets ready work
// run when the preferred action is late: the engine behind 1f1b, interleaved_1f1b,
// zb_h1, gpipe and (with no look-ahead) table.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "schedulers/stage_policy.hpp"

namespace troupe::sched {

/// Index of a kind in guided_rules::overtakes: F 0, B 1, I 2, W 3.
constexpr int kind_index(op_kind k) {
  return k == op_kind::forward ? 0 : k == op_kind::backward ? 1 : k == op_kind::input_grad ? 2 : 3;
}

/// How far a guided policy may stray from its preferred order.
struct guided_rules {
  /// Most activations held at once (stage_queue::in_flight()); 0 = unbounded.
  int in_flight_limit = 0;
  /// Most deferred W passes held at once (split backward only); 0 = unbounded.
  int deferred_weight_limit = 0;
  /// How many not-yet-started actions past the preferred one may run instead of
  /// it while it is not ready; 0 replays the order strictly.
  int look_ahead = 0;
  /// overtakes[P][C]: an action of kind C may run before a preferred action of
  /// kind P that is not ready (indices from kind_index).
  std::array<std::array<bool, 4>, 4> overtakes{};
  /// overtakes_when_idle[P][C]: an action of kind C may run before a late
  /// preferred action of kind P once the rank has idled for `patience` times
  /// the larger mean measured cost of C and P: it fills a long wait, where it is
  /// unlikely to delay P.
  std::array<std::array<bool, 4>, 4> overtakes_when_idle{};
  /// See overtakes_when_idle.
  double patience = 2.0;
};

/// Follows `order` (one rank's actions for one step), work-conserving within `rules`.
///
/// next() returns the first not-started action of the order if it is ready
/// and within the memory bounds; otherwise the first of the next
/// `rules.look_ahead` not-started actions that is ready, within the bounds,
/// allowed to overtake (now, or after the patience) and that leaves the rest
/// of the order runnable; otherwise it waits. Under equal costs the preferred
/// action is always ready in time, so the published order comes out exactly.
class guided_policy : public stage_policy {
public:
  guided_policy(std::string name, std::vector<action> order, guided_rules rules, bool split_backward);

  std::string_view name() const override { return name_; }
  bool splits_backward() const override { return split_; }
  int in_flight_limit() const override { return rules_.in_flight_limit; }
  std::optional<action> next(const stage_queue& queue) override;
  std::optional<double> wake_at(const stage_queue& queue) const override;
  std::vector<action> canonical_order() const override { return order_; }
  const guided_rules& rules() const { return rules_; }

private:
  bool admissible(const stage_queue& q, const action& a) const;
  bool keeps_order_feasible(const stage_queue& q, std::size_t index) const;
  // The first action in the look-ahead window that `allowed` admits, and when it may start.
  struct candidate {
    std::size_t index;
    double not_before;
  };
  std::optional<candidate> pick(const stage_queue& q) const;

  std::string name_;
  std::vector<action> order_;
  guided_rules rules_;
  bool split_;
  std::size_t cursor_ = 0;  // every action before it has started
  std::uint64_t step_ = 0;
};

} // namespace troupe::sched
