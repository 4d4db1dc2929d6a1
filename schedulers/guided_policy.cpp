// The order-guided, work-conserving stage policy.
#include "schedulers/guided_policy.hpp"

#include <algorithm>

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

// Running order_[index] before the not-started actions ahead of it must leave
// the rest of the order runnable within the bounds; otherwise an early forward
// could take the memory a preferred forward needs and deadlock the pipeline.
bool guided_policy::keeps_order_feasible(const stage_queue& q, std::size_t index) const {
  const action& x = order_[index];
  int act = q.in_flight() + (x.kind == op_kind::forward ? 1 : 0);
  int wts = q.deferred_weight_count() + (x.kind == op_kind::input_grad ? 1 : 0);
  if (x.kind == op_kind::weight_grad)
    --wts;
  int act_peak = act, wts_peak = wts;
  for (std::size_t i = cursor_; i < index; ++i) {
    const action& a = order_[i];
    if (q.is_started(a))
      continue;
    if (a.kind == op_kind::forward)
      act_peak = std::max(act_peak, ++act);
    if (is_backward_input(a.kind))
      --act;
    if (a.kind == op_kind::input_grad)
      wts_peak = std::max(wts_peak, ++wts);
    if (a.kind == op_kind::weight_grad)
      --wts;
  }
  return (rules_.in_flight_limit == 0 || act_peak <= rules_.in_flight_limit) &&
         (rules_.deferred_weight_limit == 0 || wts_peak <= rules_.deferred_weight_limit);
}

std::optional<guided_policy::candidate> guided_policy::pick(const stage_queue& q) const {
  const action& preferred = order_[cursor_];
  int p = kind_index(preferred.kind);
  int seen = 0;
  for (std::size_t i = cursor_ + 1; i < order_.size() && seen < rules_.look_ahead; ++i) {
    const action& a = order_[i];
    if (q.is_started(a))
      continue;
    ++seen;
    int c = kind_index(a.kind);
    bool now = rules_.overtakes[p][c];
    bool later = rules_.overtakes_when_idle[p][c];
    if (!(now || later) || !admissible(q, a) || !keeps_order_feasible(q, i))
      continue;
    if (now)
      return candidate{i, q.idle_since()};
    // Wait in units of the longer of the two passes: a late preferred pass is
    // rarely later than its own cost under jitter, and the filler must fit.
    double cost = std::max(q.mean_cost(a.kind), q.mean_cost(preferred.kind));
    if (cost > 0)  // nothing measured yet: no basis for patience
      return candidate{i, q.idle_since() + rules_.patience * cost};
  }
  return std::nullopt;
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
  if (admissible(q, order_[cursor_]))
    return order_[cursor_];
  if (auto c = pick(q); c && c->not_before <= q.now())
    return order_[c->index];
  return std::nullopt;
}

std::optional<double> guided_policy::wake_at(const stage_queue& q) const {
  if (cursor_ >= order_.size() || q.running())
    return std::nullopt;
  auto c = pick(q);
  if (c && c->not_before > q.now())
    return c->not_before;
  return std::nullopt;
}

} // namespace troupe::sched
