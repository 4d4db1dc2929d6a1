// The stage's scheduling state machine: routes, plans, credits, held messages
// and the norm reduction, shared by the stage actor and the simulated clock.
#include "schedulers/policies/stage_core.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "schedulers/routing/router.hpp"

namespace troupe::sched {

namespace {

/// The queue's credit key for "any replica of the next position": a forward is
/// ready when one of them has credit (their credits pooled); begin() picks which.
constexpr int next_replicas_key = std::numeric_limits<int>::max();

} // namespace

stage_core::stage_core(stage_core_config cfg, policy_ptr policy, stage_core_hooks hooks)
    : cfg_(std::move(cfg)), policy_(std::move(policy)), hooks_(std::move(hooks)),
      queue_(cfg_.rank, cfg_.ranks, 0, cfg_.chunks, policy_ ? policy_->placement() : chunk_placement::round_robin) {
  if (!policy_)
    throw std::invalid_argument(fmt::format("{}: no stage policy", cfg_.name));
  work_.resize(static_cast<std::size_t>(cfg_.chunks));
  for (auto& [from, n] : cfg_.input_credits)
    if (n <= 0)
      n = default_credits(policy_->in_flight_limit());
  chooser_ = least_loaded_chooser(cfg_.next_replicas);
  reporters_ = cfg_.hop_reporters;
}

void stage_core::on_credit(int from, int count, const load_report& load) {
  if (lost_.count(from)) { // a rejoining stage's credits wait for its step; a lost one's are void
    if (joins_.contains(from))
      joiner_credits_[from] += count;
    return;
  }
  if (chooser_.holds(from)) {
    chooser_.grant(from, count, load);
    queue_.grant(next_replicas_key, count);
    queue_.grant(from, count); // its own count too, for the later chunks that retrace to it
  } else {
    queue_.grant(from, count);
  }
}

void stage_core::on_hops(std::int64_t step, int from, int count) {
  if (step < step_)
    throw std::runtime_error(
      fmt::format("{}: hops reported for step {}, already done (at {})", cfg_.name, step, step_));
  auto& h = reported_hops_[step];
  ++h.heard, h.sum += count;
  h.from[from] += count;
  if (step == step_)
    apply_reported_hops();
}

void stage_core::apply_reported_hops() {
  auto plan = plans_.find(step_);
  auto h = reported_hops_.find(step_);
  if (plan == plans_.end() || plan->second.hops >= 0 || h == reported_hops_.end() || h->second.heard < reporters_)
    return;
  queue_.expect(h->second.sum);
  reported_hops_.erase(h);
  maybe_report_hops();
  maybe_finish_step();
}

// Once every output of the step has gone, each next replica learns how many it
// got (0 included): that is how a stage downstream knows its step's work.
void stage_core::maybe_report_hops() {
  if (cfg_.next_replicas.empty() || reported_ || queue_.planned() < 0 || forwarded_ < queue_.planned())
    return;
  reported_ = true;
  if (hooks_.hops)
    for (int to : cfg_.next_replicas)
      hooks_.hops(to, step_, sent_[to]);
}

// Interleaved chunks routed across replicas: only a microbatch's first chunk
// picks its replicas by load; each later chunk goes back to the stages that ran
// its earlier one (the route records them, the wrap to stage 0 keeps its own).
// Every rank then sees the later chunks of exactly the microbatches whose first
// chunk it ran, which is what the interleaved rule reserves in-flight slots for
// (rule_policies.cpp, awaits_earlier_forward). A hop chosen by load instead
// could leave a rank waiting for a chunk that went to its twin, or send it one
// whose slot it never reserved.
int stage_core::retrace(const route_t& r, int hop) const {
  for (int j = hop - 1; j >= 0; --j)
    if (chooser_.holds(r[static_cast<std::size_t>(j)].actor))
      return r[static_cast<std::size_t>(j)].actor;
  return -1;
}

int stage_core::credits_granted() const noexcept {
  int n = 0;
  for (const auto& [from, c] : cfg_.input_credits)
    n += c;
  return n;
}

void throw_bad_slot(const std::string& who, int chunk, int mb, int chunks) {
  throw std::runtime_error(
    fmt::format("{}: message for chunk {} microbatch {}, but this stage holds {} chunks", who, chunk, mb, chunks));
}

stage_core::work& stage_core::slot(int chunk, int mb) {
  return chunk_slot(work_, chunk, mb, cfg_.name);
}

int stage_core::chunk_of_hop(const route_t& r, int hop) const {
  if (hop < 0 || hop >= static_cast<int>(r.size()) || r[static_cast<std::size_t>(hop)].actor != cfg_.actor)
    throw std::runtime_error(fmt::format("{}: a message for hop {} of route [{}], which is not this stage (actor {})",
                                         cfg_.name, hop, to_string(r), cfg_.actor));
  return r[static_cast<std::size_t>(hop)].chunk;
}

void stage_core::start() {
  if (hooks_.credit)
    for (const auto& [from, n] : cfg_.input_credits)
      hooks_.credit(from, n);
}

void stage_core::return_credit(int to, int count) {
  if (to >= 0 && to != cfg_.actor && hooks_.credit)
    hooks_.credit(to, count);
}

bool stage_core::admit(std::int64_t step, bool eval, std::function<void()> replay) {
  // Targets that travel with the activation (routes across replicas) can bring
  // the loss hop its work before the router's plan, which holds the step's
  // tokens its gradient is scaled by: the step's work waits for the plan here.
  bool before_plan = !eval && step == step_ && cfg_.targets_travel && !plans_.contains(step_);
  if ((eval ? step < step_ : step <= step_) && !before_plan)
    return true;
  held_.push_back(std::move(replay));
  max_held_ = std::max(max_held_, held_.size());
  return false;
}

void stage_core::release_held() {
  auto pending = std::move(held_);
  held_.clear();
  for (auto& deliver : pending)
    deliver();
}

void stage_core::on_plan(const step_plan_msg& m) {
  if (m.step < step_ || plans_.contains(m.step))
    throw std::runtime_error(
      fmt::format("{}: a second plan for step {}, or one for a step already done (at {})", cfg_.name, m.step, step_));
  plans_[m.step] = m;
  if (m.step == step_) {
    apply_plan();
    release_held(); // work of the step that came before its plan (admit)
  }
}

void stage_core::apply_plan() {
  auto i = plans_.find(step_);
  if (i == plans_.end())
    return;
  if (i->second.hops >= 0)
    queue_.expect(i->second.hops);
  step_tokens_ = i->second.tokens;
  if (i->second.hops < 0)
    apply_reported_hops();
  maybe_report_hops();
  maybe_reduce(step_); // norms that reached the reducer before its plan
  maybe_finish_step(); // a step with no work here
}

void stage_core::push_input(int c, int mb) {
  auto& w = slot(c, mb);
  auto hops = static_cast<int>(w.route.size());
  if (w.hop + 1 == hops && !w.targets)
    return; // the loss needs its targets too; on_batch pushes when they come
  int next = w.hop + 1 < hops ? w.route[static_cast<std::size_t>(w.hop + 1)].actor : -1;
  if (next >= 0 && chooser_.holds(next)) {
    int back = retrace(w.route, w.hop + 1);
    next = back >= 0 ? back : next_replicas_key;
  }
  hop_info info{w.hop, hops - w.hop, next == cfg_.actor ? -1 : next};
  if (auto r = queue_.push_forward(queue_.stage_of(c), mb, info); !r)
    throw std::runtime_error(fmt::format("{}: {}", cfg_.name, r.error().message));
}

void stage_core::on_batch(const msg_meta& m, bool tokens, bool targets) {
  if (m.route.empty())
    throw std::runtime_error(
      fmt::format("{}: a batch for step {} microbatch {} without a route", cfg_.name, m.step, m.microbatch));
  int last = static_cast<int>(m.route.size()) - 1;
  if (targets) {
    int c = chunk_of_hop(m.route, last);
    auto& w = slot(c, m.microbatch);
    w.targets = true;
    if (!tokens && w.hop == last)
      push_input(c, m.microbatch); // the activation came first
  }
  if (tokens) {
    int c = chunk_of_hop(m.route, 0);
    auto& w = slot(c, m.microbatch);
    w.route = m.route, w.hop = 0;
    push_input(c, m.microbatch);
  }
}

void stage_core::on_activation(const msg_meta& m) {
  int c = chunk_of_hop(m.route, m.hop);
  if (m.hop > 0)
    ++arrived_from_[m.route[static_cast<std::size_t>(m.hop - 1)].actor];
  auto& w = slot(c, m.microbatch);
  w.route = m.route, w.hop = m.hop;
  if (cfg_.targets_travel && m.hop + 1 == static_cast<int>(m.route.size()))
    w.targets = true;
  push_input(c, m.microbatch);
}

void stage_core::on_gradient(const msg_meta& m) {
  int c = chunk_of_hop(m.route, m.hop);
  if (auto r = queue_.push_backward(queue_.stage_of(c), m.microbatch); !r)
    throw std::runtime_error(fmt::format("{}: {}", cfg_.name, r.error().message));
}

std::optional<double> stage_core::wake_in() const {
  if (awaiting_total_ || awaiting_sync_ || training_done())
    return std::nullopt;
  auto t = policy_->wake_at(queue_);
  if (!t)
    return std::nullopt;
  return std::max(0.0, *t - now());
}

std::optional<stage_task> stage_core::begin() {
  if (awaiting_total_ || awaiting_sync_ || training_done() || queue_.running())
    return std::nullopt;
  queue_.set_now(now());
  auto a = policy_->next(queue_);
  if (!a)
    return std::nullopt;
  if (auto r = queue_.start(*a); !r)
    throw std::runtime_error(
      fmt::format("{}: policy {} chose {}: {}", cfg_.name, policy_->name(), to_string(*a), r.error().message));
  if (a->kind != op_kind::overlap)
    return started(*a);
  auto p = parts(*a);
  stage_task t = started(p.part[0]);
  t.parts = {t, started(p.part[1])};
  t.what = *a;
  return t;
}

stage_task stage_core::started(const action& a) {
  int c = queue_.chunk_of(a.stage);
  auto& w = slot(c, a.microbatch);
  stage_task t{a, c, w.hop, w.hop + 1 == static_cast<int>(w.route.size()), step_};
  if (a.kind == op_kind::forward) {
    // The input's buffer is free once the forward starts: give its sender the credit back.
    return_credit(w.hop == 0 ? cfg_.router : w.route[static_cast<std::size_t>(w.hop - 1)].actor);
    if (t.loss && w.hop != 0 && !cfg_.targets_travel)
      return_credit(cfg_.router); // the targets' buffer too (with tokens, one message held both)
    // Routing around stragglers: the output goes to the next replica likely to
    // finish it first; the route records the choice, so its gradient comes back here.
    if (!t.loss) {
      auto& next = w.route[static_cast<std::size_t>(w.hop + 1)];
      if (chooser_.holds(next.actor)) {
        int back = retrace(w.route, w.hop + 1);
        int to = back >= 0 ? back : chooser_.pick(next.actor);
        if (to < 0)
          throw std::runtime_error(fmt::format("{}: a forward started with no credit at any next replica", cfg_.name));
        chooser_.take(to);
        queue_.grant(back >= 0 ? next_replicas_key : to, -1); // the queue took the other count's credit
        next.actor = to;
        ++sent_[to];
      }
    }
  }
  return t;
}

void stage_core::finish(const stage_task& t) {
  queue_.set_now(now());
  if (auto r = queue_.finish(t.what); !r)
    throw std::runtime_error(fmt::format("{}: {}", cfg_.name, r.error().message));
  // Routing around stragglers: every sender of the previous position hears this
  // stage's load whenever it finishes work (a credit of 0), not only the one
  // whose input it takes, so none routes on a load it never heard of.
  if (cfg_.hop_reporters > 0 && hooks_.credit)
    for (const auto& [from, n] : cfg_.input_credits)
      if (from != cfg_.router && from != cfg_.actor)
        hooks_.credit(from, 0);
  if (t.parts.empty())
    send_output(t);
  for (const auto& part : t.parts) // an F&B: the forward's activation, then the backward's gradient
    send_output(part);
  maybe_finish_step();
}

void stage_core::send_output(const stage_task& t) {
  const auto& route = slot(t.chunk, t.what.microbatch).route;
  if (t.what.kind == op_kind::forward && !t.loss) {
    msg_meta m{step_, t.what.microbatch, t.hop + 1, route};
    int to = route[static_cast<std::size_t>(t.hop + 1)].actor;
    if (hooks_.forward)
      hooks_.forward(to, m);
    if (to == cfg_.actor)
      on_activation(m);
    ++forwarded_;
    maybe_report_hops();
  } else if (is_backward_input(t.what.kind) && t.hop > 0) {
    msg_meta m{step_, t.what.microbatch, t.hop - 1, route};
    int to = route[static_cast<std::size_t>(t.hop - 1)].actor;
    if (hooks_.backward)
      hooks_.backward(to, m);
    if (to == cfg_.actor)
      on_gradient(m);
  }
}

void stage_core::maybe_finish_step() {
  if (awaiting_total_ || awaiting_sync_ || training_done() || !queue_.step_complete())
    return;
  if (hooks_.sync && !hooks_.sync(step_)) {
    awaiting_sync_ = true;
    return;
  }
  reduce_norm();
}

void stage_core::on_synced(std::int64_t step) {
  if (!awaiting_sync_ || step != step_)
    return;
  awaiting_sync_ = false;
  reduce_norm();
}

void stage_core::reduce_norm() {
  double own_sq = hooks_.gradients_complete ? hooks_.gradients_complete(step_) : 0.0;
  const auto& plan = plans_.at(step_);
  if (!cfg_.reduce_norm || plan.participants <= 1) {
    finish_step(own_sq);
    return;
  }
  // Global-norm clipping is a reduction: every participant sends its Σ g² to
  // the reducer, which answers each with the total (2(n-1) messages a step).
  // Post-validation steps meanwhile: the norm goes out first, then the update
  // runs while it travels (the reducer's own update before it hears its last norm).
  awaiting_total_ = true;
  bool early = cfg_.post_validate && hooks_.update_early;
  if (plan.reducer == cfg_.actor) {
    if (early)
      hooks_.update_early(step_);
    on_norm(step_, own_sq, cfg_.actor);
    return;
  }
  if (hooks_.norm)
    hooks_.norm(plan.reducer, step_, own_sq);
  if (early)
    hooks_.update_early(step_);
}

void stage_core::on_norm(std::int64_t step, double sq_norm, int from) {
  auto& r = norms_[step];
  ++r.heard, r.by_actor[from] += sq_norm;
  if (from != cfg_.actor)
    r.from.push_back(from);
  maybe_reduce(step);
}

void stage_core::maybe_reduce(std::int64_t step) {
  auto r = norms_.find(step);
  auto plan = plans_.find(step);
  if (r == norms_.end() || plan == plans_.end() || r->second.heard < plan->second.participants)
    return;
  if (plan->second.reducer != cfg_.actor)
    throw std::runtime_error(
      fmt::format("{}: gradient norms for step {} reached a stage that is not its reducer", cfg_.name, step));
  // In actor order: replicas that each reduce their own norm (elastic DDP) get the same total, bit for bit.
  double total = 0;
  for (auto [actor, sq] : r->second.by_actor)
    total += sq;
  if (hooks_.clip)
    for (int to : r->second.from)
      hooks_.clip(to, step, total);
  norms_.erase(r);
  on_clip(step, total);
}

void stage_core::on_clip(std::int64_t step, double total_sq) {
  totals_[step] = total_sq;
  if (awaiting_total_ && step == step_)
    finish_step(total_sq);
}

void stage_core::finish_step(double total_sq) {
  if (hooks_.update)
    hooks_.update(step_, total_sq);
  totals_.erase(step_);
  plans_.erase(step_);
  awaiting_total_ = false;
  step_tokens_ = 0;
  queue_.reset();
  sent_.clear(), forwarded_ = 0, reported_ = false;
  arrived_from_.clear();
  for (auto& chunk_work : work_)
    for (auto& w : chunk_work)
      w.hop = -1, w.targets = false;
  if (hooks_.exchange && !hooks_.exchange(step_ + 1)) {
    awaiting_exchange_ = true; // the next step's messages stay held until the parameters are rewritten
    return;
  }
  advance_step();
}

void stage_core::on_exchanged() {
  if (!awaiting_exchange_)
    return;
  awaiting_exchange_ = false;
  advance_step();
}

void stage_core::advance_step() {
  ++step_;
  if (hooks_.updated)
    hooks_.updated(step_);
  apply_joins();
  apply_plan();
  release_held();
}

std::vector<msg_meta> stage_core::drop_actors(const std::set<int>& lost) {
  if (cfg_.chunks != 1)
    throw std::runtime_error(fmt::format("{}: a replica left a run routed across replicas over {} chunks a stage; "
                                         "a later chunk would go back to the lost replica",
                                         cfg_.name, cfg_.chunks));
  for (int a : lost) {
    joins_.erase(a), joiner_credits_.erase(a); // lost again on its way back
    if (a == cfg_.actor || !lost_.insert(a).second)
      continue;
    if (chooser_.holds(a)) { // on_credit pooled its credits and counted them as its own too
      queue_.grant(next_replicas_key, -chooser_.leave(a));
      queue_.grant(a, -queue_.credits(a));
    }
    if (cfg_.hop_reporters == 0 || a == cfg_.router || !cfg_.input_credits.contains(a))
      continue;
    --reporters_;
    // Its messages are dropped from now on: what arrived of this step is its
    // count (a report comes after the activations it counts, so one that came
    // counted only what arrived), and a later step's report no longer counts.
    // A later step's report (it may run ahead while this stage syncs) goes, with
    // its activations, which wait here unadmitted and will be dropped.
    for (auto& [step, h] : reported_hops_) {
      auto r = h.from.find(a);
      if (step == step_ && r == h.from.end())
        h.sum += arrived_from_[a];
      if (r == h.from.end())
        continue;
      --h.heard;
      if (step > step_)
        h.sum -= r->second;
      h.from.erase(r);
    }
    if (!reported_hops_.contains(step_) && queue_.planned() < 0) // none reported yet: the count starts at its share
      reported_hops_[step_].sum = arrived_from_[a];
  }
  std::vector<msg_meta> backed_out;
  auto& chunk_work = work_.front();
  for (std::size_t mb = 0; mb < chunk_work.size(); ++mb) {
    const auto& w = chunk_work[mb];
    if (w.hop >= 0 && w.hop + 1 < static_cast<int>(w.route.size()) &&
        lost_.count(w.route[static_cast<std::size_t>(w.hop + 1)].actor) &&
        queue_.awaits_gradient(queue_.stage_of(0), static_cast<int>(mb)))
      backed_out.push_back({step_, static_cast<int>(mb), w.hop, w.route});
  }
  apply_reported_hops();
  return backed_out;
}

bool stage_core::drops_from(int actor, std::int64_t step) const {
  if (!lost_.count(actor))
    return false;
  auto j = joins_.find(actor);
  return j == joins_.end() || step < j->second;
}

void stage_core::add_actors(const std::set<int>& back, std::int64_t from) {
  if (from < step_)
    throw std::runtime_error(
      fmt::format("{}: a replica rejoins at step {}, which this stage has passed (at {})", cfg_.name, from, step_));
  for (int a : back) {
    if (!lost_.count(a))
      throw std::runtime_error(
        fmt::format("{}: actor {} rejoins at step {}, but it has not left the run", cfg_.name, a, from));
    joins_[a] = from;
  }
  if (from == step_) // before the step's plan (the router sent the rejoin first): its work is still to come
    apply_joins();
}

// The joiner's stages start at its step with nothing of the run's earlier
// steps: the survivors route to them, count their reports and grant them their
// credits from that step on, exactly as at the run's start.
void stage_core::apply_joins() {
  for (auto j = joins_.begin(); j != joins_.end();) {
    if (j->second > step_) {
      ++j;
      continue;
    }
    int a = j->first;
    j = joins_.erase(j);
    lost_.erase(a);
    int kept = 0; // drop_actors voided its old credits; these are all it has
    if (auto c = joiner_credits_.find(a); c != joiner_credits_.end())
      kept = c->second, joiner_credits_.erase(c);
    if (chooser_.holds(a)) {
      chooser_.rejoin(a);
      on_credit(a, kept);
    }
    if (auto c = cfg_.input_credits.find(a); c != cfg_.input_credits.end() && a != cfg_.router) {
      if (cfg_.hop_reporters > 0)
        ++reporters_;
      return_credit(a, c->second);
    }
  }
}

} // namespace troupe::sched
