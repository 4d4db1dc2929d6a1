// Incremental bookkeeping of one rank's queued, running and finished pipeline
// work, its receivers' credits and the step's plan.
#include "schedulers/policies/stage_queue.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace troupe::sched {

stage_queue::stage_queue(int rank, int ranks, int microbatches, int chunks, chunk_placement placement)
    : rank_(rank), ranks_(ranks), fixed_microbatches_(microbatches), chunks_(chunks), placement_(placement) {
  reset();
  step_ = 0;
}

void stage_queue::reset() {
  for (auto& c : chunks_state_) { // keep the vectors' capacity: a step allocates nothing once warm
    c.flags.assign(c.flags.size(), 0);
    c.ready_f.clear(), c.blocked_f.clear(), c.ready_b.clear(), c.ready_w.clear();
    c.started_f.clear();
    c.in_flight = 0, c.completed = 0;
  }
  chunks_state_.resize(static_cast<std::size_t>(chunks_));
  planned_ = fixed_microbatches_ > 0 ? fixed_microbatches_ * chunks_ : -1;
  in_flight_total_ = 0;
  complete_ = 0;
  arrived_ = 0;
  arrivals_ = 0;
  running_.reset();
  idle_since_ = now_;
  ++step_;
}

namespace {
int slot(op_kind k) {
  switch (k) {
  case op_kind::forward:
    return 0;
  case op_kind::backward:
    return 1;
  case op_kind::input_grad:
    return 2;
  case op_kind::weight_grad:
    return 3;
  case op_kind::overlap:
    return 4;
  }
  return 0;
}
} // namespace

double stage_queue::mean_cost(op_kind kind) const {
  int i = slot(kind);
  if (cost_count_[i] > 0)
    return cost_sum_[i] / cost_count_[i];
  double sum = 0;
  int n = 0;
  for (int k = 0; k < kinds; ++k) {
    sum += cost_sum_[k];
    n += cost_count_[k];
  }
  return n > 0 ? sum / n : 0.0;
}

int stage_queue::deferred_weight_count() const {
  int n = 0;
  for (const auto& c : chunks_state_)
    n += static_cast<int>(c.ready_w.size());
  return n;
}

void stage_queue::grant(int actor, int count) {
  credits_[actor] += count;
  refresh_credit_gates();
}

int stage_queue::credits(int actor) const {
  auto i = credits_.find(actor);
  return i == credits_.end() ? 0 : i->second;
}

void stage_queue::refresh_credit_gates() {
  for (auto& c : chunks_state_) {
    for (auto it = c.blocked_f.begin(); it != c.blocked_f.end();)
      if (has_credit(c.info[static_cast<std::size_t>(*it)]))
        c.ready_f.insert(*it), it = c.blocked_f.erase(it);
      else
        ++it;
    for (auto it = c.ready_f.begin(); it != c.ready_f.end();)
      if (!has_credit(c.info[static_cast<std::size_t>(*it)]))
        c.blocked_f.insert(*it), it = c.ready_f.erase(it);
      else
        ++it;
  }
}

expected<void> stage_queue::check(int stage, int microbatch, const char* what) const {
  if (!owns(stage))
    return make_sched_error(fmt::format("rank {}: {} for stage {}, which this rank does not own "
                                        "(it owns stages {} + c*{} for c < {})",
                                        rank_, what, stage, rank_, ranks_, chunks_));
  if (microbatch < 0 || (fixed_microbatches_ > 0 && microbatch >= fixed_microbatches_))
    return make_sched_error(fmt::format("rank {}: {} for microbatch {}, outside 0..{}", rank_, what, microbatch,
                                        fixed_microbatches_ > 0 ? fixed_microbatches_ - 1 : 0x7fffffff));
  return {};
}

std::uint8_t stage_queue::flags(const action& a) const {
  if (!owns(a.stage) || a.microbatch < 0)
    return 0;
  const auto& f = chunks_state_[static_cast<std::size_t>(chunk_of(a.stage))].flags;
  return static_cast<std::size_t>(a.microbatch) < f.size() ? f[static_cast<std::size_t>(a.microbatch)] : 0;
}

const hop_info* stage_queue::info(const action& a) const {
  if (!(flags(a) & f_arrived))
    return nullptr;
  return &chunks_state_[static_cast<std::size_t>(chunk_of(a.stage))].info[static_cast<std::size_t>(a.microbatch)];
}

bool stage_queue::holds(int mb) const {
  for (const auto& c : chunks_state_)
    if (auto i = static_cast<std::size_t>(mb); i < c.flags.size() && (c.flags[i] & f_started) && !(c.flags[i] & b_done))
      return true;
  return false;
}

bool stage_queue::awaits_gradient(int stage, int microbatch) const {
  if (!owns(stage) || microbatch < 0)
    return false;
  const auto& flags = chunks_state_[static_cast<std::size_t>(chunk_of(stage))].flags;
  auto i = static_cast<std::size_t>(microbatch);
  return i < flags.size() && (flags[i] & f_done) && !(flags[i] & b_arrived);
}

int stage_queue::held_within(int hops) const {
  std::size_t n = 0;
  for (const auto& c : chunks_state_)
    n = std::max(n, c.flags.size());
  int held = 0;
  for (std::size_t i = 0; i < n; ++i) // by microbatch, so one held on two chunks counts once
    held += std::any_of(chunks_state_.begin(), chunks_state_.end(), [&](const chunk_state& c) {
      return i < c.flags.size() && (c.flags[i] & f_started) && !(c.flags[i] & b_done) && c.info[i].hops_left <= hops;
    });
  return held;
}

int stage_queue::arrival(const action& a) const {
  if (a.kind == op_kind::overlap)
    return std::max(arrival(parts(a).part[0]), arrival(parts(a).part[1]));
  auto f = flags(a);
  auto i = static_cast<std::size_t>(a.microbatch);
  const auto& c = chunks_state_[static_cast<std::size_t>(chunk_of(a.stage))];
  if (a.kind == op_kind::forward)
    return f & f_arrived ? c.arrival_f[i] : -1;
  return f & b_arrived ? c.arrival_b[i] : -1;
}

int stage_queue::hop_index(const action& a) const {
  auto i = info(a);
  return i ? i->hop : a.stage;
}

int stage_queue::hops_left(const action& a) const {
  auto i = info(a);
  return i ? i->hops_left : stages() - a.stage;
}

expected<void> stage_queue::push_forward(int stage, int mb, std::optional<hop_info> given) {
  if (auto ok = check(stage, mb, "activation"); !ok)
    return ok;
  auto& c = chunks_state_[static_cast<std::size_t>(chunk_of(stage))];
  auto i = static_cast<std::size_t>(mb);
  if (i >= c.flags.size())
    c.flags.resize(i + 1, 0), c.info.resize(i + 1), c.arrival_f.resize(i + 1), c.arrival_b.resize(i + 1);
  auto& f = c.flags[i];
  if (f & f_arrived)
    return make_sched_error(fmt::format("rank {}: duplicate activation for {}", rank_, to_string(fwd(stage, mb))));
  f |= f_arrived;
  ++arrived_;
  c.arrival_f[i] = arrivals_++;
  c.info[i] = given ? *given : hop_info{stage, stages() - stage, -1};
  (has_credit(c.info[i]) ? c.ready_f : c.blocked_f).insert(mb);
  return {};
}

expected<void> stage_queue::push_backward(int stage, int mb) {
  if (auto ok = check(stage, mb, "gradient"); !ok)
    return ok;
  auto& c = chunks_state_[static_cast<std::size_t>(chunk_of(stage))];
  if (!(flags(bwd(stage, mb)) & f_done))
    return make_sched_error(
      fmt::format("rank {}: gradient for {} arrived before its forward finished", rank_, to_string(bwd(stage, mb))));
  auto& f = c.flags[static_cast<std::size_t>(mb)];
  if (f & b_arrived)
    return make_sched_error(fmt::format("rank {}: duplicate gradient for {}", rank_, to_string(bwd(stage, mb))));
  f |= b_arrived;
  c.arrival_b[static_cast<std::size_t>(mb)] = arrivals_++;
  c.ready_b.insert(mb);
  return {};
}

bool stage_queue::is_ready(const action& a) const {
  if (a.kind == op_kind::overlap) {
    auto p = parts(a);
    return chunk_of(a.stage) != chunk_of(a.back_stage) && is_ready(p.part[0]) && is_ready(p.part[1]);
  }
  auto f = flags(a);
  switch (a.kind) {
  case op_kind::forward:
    return (f & f_arrived) && !(f & f_started) && has_credit(*info(a));
  case op_kind::backward:
  case op_kind::input_grad:
    return (f & b_arrived) && !(f & b_started);
  case op_kind::weight_grad:
    return (f & b_done) && !(f & w_started);
  case op_kind::overlap: // its parts, above
    break;
  }
  return false;
}

bool stage_queue::is_started(const action& a) const {
  if (a.kind == op_kind::overlap)
    return std::ranges::all_of(parts(a), [&](const action& x) { return is_started(x); });
  auto f = flags(a);
  switch (a.kind) {
  case op_kind::forward:
    return f & f_started;
  case op_kind::backward:
  case op_kind::input_grad:
    return f & b_started;
  case op_kind::weight_grad:
    return f & w_started;
  case op_kind::overlap: // its parts, above
    break;
  }
  return false;
}

bool stage_queue::is_done(const action& a) const {
  if (a.kind == op_kind::overlap)
    return std::ranges::all_of(parts(a), [&](const action& x) { return is_done(x); });
  auto f = flags(a);
  switch (a.kind) {
  case op_kind::forward:
    return f & f_done;
  case op_kind::input_grad:
    return f & b_done;
  case op_kind::backward:
  case op_kind::weight_grad:
    return f & w_done;
  case op_kind::overlap: // its parts, above
    break;
  }
  return false;
}

expected<void> stage_queue::start(const action& a) {
  for (const auto& x : parts(a))
    if (auto ok = check(x.stage, x.microbatch, "start"); !ok)
      return ok;
  if (running_)
    return make_sched_error(
      fmt::format("rank {}: cannot start {} while {} runs", rank_, to_string(a), to_string(*running_)));
  if (!is_ready(a))
    return make_sched_error(fmt::format("rank {}: {} is not ready (its input has not arrived, its receiver has "
                                        "no credit, or it already ran)",
                                        rank_, to_string(a)));
  for (const auto& x : parts(a))
    start_part(x);
  running_ = a;
  started_at_ = now_;
  return {};
}

void stage_queue::start_part(const action& a) {
  auto& c = chunks_state_[static_cast<std::size_t>(chunk_of(a.stage))];
  auto& f = c.flags[static_cast<std::size_t>(a.microbatch)];
  switch (a.kind) {
  case op_kind::forward:
    f |= f_started;
    c.ready_f.erase(a.microbatch);
    c.started_f.push_back(a.microbatch);
    ++c.in_flight;
    ++in_flight_total_;
    if (int next = c.info[static_cast<std::size_t>(a.microbatch)].next_actor; next >= 0) {
      --credits_[next]; // the output's buffer at the receiver is now spoken for
      refresh_credit_gates();
    }
    break;
  case op_kind::backward:
  case op_kind::input_grad:
    f |= b_started;
    c.ready_b.erase(a.microbatch);
    break;
  case op_kind::weight_grad:
    f |= w_started;
    c.ready_w.erase(a.microbatch);
    break;
  case op_kind::overlap: // start() passes its parts
    break;
  }
}

expected<void> stage_queue::finish(const action& a) {
  if (!running_ || !(*running_ == a))
    return make_sched_error(fmt::format("rank {}: finished {} but {} was running", rank_, to_string(a),
                                        running_ ? to_string(*running_) : std::string{"nothing"}));
  running_.reset();
  cost_sum_[slot(a.kind)] += now_ - started_at_;
  ++cost_count_[slot(a.kind)];
  idle_since_ = now_;
  for (const auto& x : parts(a))
    finish_part(x);
  return {};
}

void stage_queue::finish_part(const action& a) {
  auto& c = chunks_state_[static_cast<std::size_t>(chunk_of(a.stage))];
  auto& f = c.flags[static_cast<std::size_t>(a.microbatch)];
  switch (a.kind) {
  case op_kind::forward:
    f |= f_done;
    if (c.info[static_cast<std::size_t>(a.microbatch)].hops_left == 1) { // the loss gradient is computed locally
      f |= b_arrived;
      c.arrival_b[static_cast<std::size_t>(a.microbatch)] = arrivals_++;
      c.ready_b.insert(a.microbatch);
    }
    break;
  case op_kind::backward:
    f |= b_done | w_started | w_done;
    --c.in_flight;
    --in_flight_total_;
    ++c.completed;
    ++complete_;
    break;
  case op_kind::input_grad:
    f |= b_done;
    --c.in_flight;
    --in_flight_total_;
    c.ready_w.insert(a.microbatch);
    break;
  case op_kind::weight_grad:
    f |= w_done;
    ++c.completed;
    ++complete_;
    break;
  case op_kind::overlap: // finish() passes its parts
    break;
  }
}

} // namespace troupe::sched
