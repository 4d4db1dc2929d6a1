// The policy behind `table`: replays one rank's action list exactly, waiting
// whenever the next action is not ready. Built-in schedules are rules
// (rule_policies.hpp); replaying is `table`'s job alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedulers/policies/stage_policy.hpp"

namespace troupe::sched {

/// Runs `order` (one rank's actions for one step) strictly in order, step after step.
class guided_policy : public stage_policy {
public:
  guided_policy(std::string name, std::vector<action> order, int in_flight_limit, bool split_backward);

  std::string_view name() const override { return name_; }
  bool splits_backward() const override { return split_; }
  int in_flight_limit() const override { return in_flight_limit_; }
  std::optional<action> next(const stage_queue& queue) override;
  std::vector<action> canonical_order() const override { return order_; }

private:
  std::string name_;
  std::vector<action> order_;
  int in_flight_limit_;
  bool split_;
  std::size_t cursor_ = 0; // every action before it has started
  std::uint64_t step_ = 0;
};

} // namespace troupe::sched
