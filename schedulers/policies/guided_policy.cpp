// The strict replay of one rank's action list.
#include "schedulers/policies/guided_policy.hpp"

namespace troupe::sched {

guided_policy::guided_policy(std::string name, std::vector<action> order, int in_flight_limit, bool split)
    : name_(std::move(name)), order_(std::move(order)), in_flight_limit_(in_flight_limit), split_(split) {}

std::optional<action> guided_policy::next(const stage_queue& q) {
  if (q.step() != step_) {
    step_ = q.step();
    cursor_ = 0;
  }
  while (cursor_ < order_.size() && q.is_started(order_[cursor_]))
    ++cursor_;
  if (cursor_ < order_.size() && q.is_ready(order_[cursor_]))
    return order_[cursor_];
  return std::nullopt;
}

} // namespace troupe::sched
