// The least-loaded choice of the next hop: measured load, credits, the own replica last.
#include "schedulers/routing/least_loaded.hpp"

#include <algorithm>

namespace troupe::sched {

load_report measure_load(const stage_queue& q) {
  double f = q.mean_cost(op_kind::forward), b = q.mean_cost(op_kind::backward);
  std::size_t waiting = 0;
  for (int c = 0; c < q.chunks(); ++c)
    waiting += q.ready_forward(c).size() + q.blocked_forward(c).size();
  return {static_cast<double>(waiting) * (f + b) + static_cast<double>(q.in_flight()) * b, f + b};
}

bool least_loaded_chooser::holds(int actor) const {
  return std::find(replicas_.begin(), replicas_.end(), actor) != replicas_.end();
}

void least_loaded_chooser::grant(int actor, int count, const load_report& load) {
  if (gone_.count(actor))
    return;
  auto& r = receivers_[actor];
  r.credits += count;
  r.load = load;
  r.sent_since_report = 0;
}

int least_loaded_chooser::credits(int actor) const {
  auto i = receivers_.find(actor);
  return i == receivers_.end() ? 0 : i->second.credits;
}

int least_loaded_chooser::total_credits() const {
  int n = 0;
  for (const auto& [a, r] : receivers_)
    n += r.credits;
  return n;
}

int least_loaded_chooser::pick(int own) const {
  auto finish = [](const receiver& r) { return r.load.backlog_s + (r.sent_since_report + 1) * r.load.cost_s; };
  int best = -1;
  double best_finish = 0;
  int best_credits = 0;
  for (int a : replicas_) {
    auto i = receivers_.find(a);
    if (gone_.count(a))
      continue;
    if (i == receivers_.end() || i->second.credits < 1)
      continue;
    double f = finish(i->second);
    double tol = 1e-9 * std::max(f, best_finish);
    if (best < 0 || f < best_finish - tol || (f <= best_finish + tol && i->second.credits > best_credits))
      best = a, best_finish = f, best_credits = i->second.credits;
  }
  // The own replica keeps its microbatch unless another finishes it sooner by
  // half a microbatch or more: moving work for less only trades one queue for
  // another on stale reports (and a whole replica's microbatches would chase
  // the same momentarily idle receiver).
  auto o = gone_.count(own) ? receivers_.end() : receivers_.find(own);
  if (best >= 0 && o != receivers_.end() && o->second.credits > 0 &&
      finish(o->second) <= best_finish + 0.5 * o->second.load.cost_s)
    return own;
  return best;
}

int least_loaded_chooser::leave(int actor) {
  gone_.insert(actor);
  auto i = receivers_.find(actor);
  if (i == receivers_.end())
    return 0;
  int credits = i->second.credits;
  receivers_.erase(i);
  return credits;
}

void least_loaded_chooser::take(int actor) {
  auto& r = receivers_[actor];
  --r.credits;
  ++r.sent_since_report;
}

} // namespace troupe::sched
