// The order-guided, work-conserving stage policy.
#include "schedulers/guided_policy.hpp"

namespace troupe::sched {

guided_policy::guided_policy(std::string name, std::vector<action> order, guided_rules rules, bool split)
  : name_(std::move(name)), order_(std::move(order)), rules_(rules), split_(split) {}

bool guided_policy::admissible(const stage_queue& q, const action& a) const {
  if (!q.is_ready(a))
    return false;
  if (a.kind == op_kind::forward && rules_.in_flight_limit > 0 && q.in_flight() >= rules_.in_flight_limit)
    return false;
  if (a.kind == op_kind::input_grad && rules_.deferred_weight_limit > 0 &&
      q.deferred_weight_count() >= rules_.deferred_weight_limit)
    return false;
  return true;
}

std::optional<action> guided_policy::next(const stage_queue& q) {
  if (q.step() != step_) {
    step_ = q.step();
    cursor_ = 0;
  }
  while (cursor_ < order_.size() && q.is_started(order_[cursor_]))
    ++cursor_;
  if (cursor_ == order_.size())
    return std::nullopt;
  const action& preferred = order_[cursor_];
  if (admissible(q, preferred))
    return preferred;
  int seen = 0;
  for (std::size_t i = cursor_ + 1; i < order_.size() && seen < rules_.look_ahead; ++i) {
    const action& a = order_[i];
    if (q.is_started(a))
      continue;
    ++seen;
    if (rules_.same_kind_only && a.kind != preferred.kind)
      continue;
    if (rules_.forward_never_overtakes_backward && a.kind == op_kind::forward && preferred.kind != op_kind::forward)
      continue;
    if (admissible(q, a))
      return a;
  }
  return std::nullopt;
}

} // namespace troupe::sched
