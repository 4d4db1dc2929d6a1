// The pipeline stage's state machine: inputs and gradients in, one policy-chosen
// action at a time, the step boundary when every microbatch has its gradient.
#include "actors/stage_engine.hpp"

#include "runtime/checkpoint.hpp"

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "ops/adamw.hpp"
#include "ops/grad_clip.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/errors.hpp"
#include "runtime/trace.hpp"

namespace troupe {

namespace {

span_kind span_of(sched::op_kind k) {
  switch (k) {
    case sched::op_kind::forward: return span_kind::forward;
    case sched::op_kind::backward: return span_kind::backward;
    case sched::op_kind::input_grad: return span_kind::backward_input;
    case sched::op_kind::weight_grad: return span_kind::backward_weight;
  }
  return span_kind::other;
}

/// Empties a slot and returns what it held.
template <class Slot>
Slot take(Slot& slot, const char* what, const std::string& who) {
  if (!slot.defined())
    throw std::runtime_error(fmt::format("{}: no {} for the action the policy chose", who, what));
  return std::exchange(slot, Slot{});
}

} // namespace

stage_engine::stage_engine(stage_config cfg, stage_outbox out)
  : cfg_(std::move(cfg)), out_(std::move(out)), queue_(cfg_.rank, cfg_.ranks, 0, cfg_.chunks) {
  if (static_cast<int>(cfg_.layers.size()) != cfg_.chunks)
    throw std::invalid_argument(fmt::format("{}: {} layer ranges for {} chunks", cfg_.name, cfg_.layers.size(),
                                            cfg_.chunks));
  if (cfg_.device.is_cpu()) {
    chunks_.reserve(cfg_.layers.size()); // models_ point into it
    for (auto [b, e] : cfg_.layers)
      models_.push_back(make_cpu_stage_model(chunks_.emplace_back(cfg_.model, b, e)));
  } else {
    for (auto [b, e] : cfg_.layers)
      models_.push_back(make_stage_model({cfg_.model, b, e, cfg_.device, cfg_.max_batch}));
  }
  for (auto& m : models_)
    optimizers_.push_back(
        std::make_unique<ops::adamw>(m->params(), ops::adamw_options{.weight_decay = cfg_.weight_decay}, m->stream()));
  auto p = cfg_.policy_params;
  p.rank = cfg_.rank, p.ranks = cfg_.ranks, p.chunks = cfg_.chunks;
  auto made = sched::make_policy(cfg_.policy, p);
  if (!made)
    throw std::invalid_argument(fmt::format("{}: {}", cfg_.name, made.error().message));
  policy_ = std::move(*made);
  work_.resize(static_cast<std::size_t>(cfg_.chunks));
  for (auto& [from, n] : cfg_.input_credits)
    if (n <= 0)
      n = sched::default_credits(policy_->in_flight_limit());
}

int stage_engine::credits_granted() const noexcept {
  int n = 0;
  for (const auto& [from, c] : cfg_.input_credits)
    n += c;
  return n;
}

stage_engine::work& stage_engine::slot(int chunk, int mb) {
  if (chunk < 0 || chunk >= cfg_.chunks || mb < 0 || mb > (1 << 20))
    throw std::runtime_error(fmt::format("{}: message for chunk {} microbatch {}, but this stage holds {} chunks",
                                         cfg_.name, chunk, mb, cfg_.chunks));
  auto& w = work_[static_cast<std::size_t>(chunk)];
  if (static_cast<std::size_t>(mb) >= w.size())
    w.resize(static_cast<std::size_t>(mb) + 1);
  return w[static_cast<std::size_t>(mb)];
}

int stage_engine::chunk_of_hop(const route_t& r, int hop) const {
  if (hop < 0 || hop >= static_cast<int>(r.size()) || r[static_cast<std::size_t>(hop)].actor != cfg_.actor)
    throw std::runtime_error(fmt::format("{}: a message for hop {} of route [{}], which is not this stage (actor {})",
                                         cfg_.name, hop, to_string(r), cfg_.actor));
  return r[static_cast<std::size_t>(hop)].chunk;
}

void stage_engine::start() {
  for (const auto& [from, n] : cfg_.input_credits)
    out_.credit(from, credit_msg{n, cfg_.actor});
}

void stage_engine::return_credit(int to, int count) {
  if (to >= 0 && to != cfg_.actor)
    out_.credit(to, credit_msg{count, cfg_.actor});
}

void stage_engine::hold(held h) {
  held_.push_back(std::move(h));
  max_held_ = std::max(max_held_, held_.size());
}

void stage_engine::release_held() {
  auto pending = std::move(held_);
  held_.clear();
  for (auto& h : pending) {
    switch (h.kind) {
      case held::batch: on_batch(h.b, h.eval); break;
      case held::activation: on_activation(h.a, h.eval); break;
      case held::gradient: on_gradient(h.g); break;
    }
  }
}

void stage_engine::on_plan(const step_plan_msg& m) {
  if (m.step < step_ || plans_.contains(m.step))
    throw std::runtime_error(fmt::format("{}: a second plan for step {}, or one for a step already done (at {})",
                                         cfg_.name, m.step, step_));
  plans_[m.step] = m;
  if (m.step == step_)
    apply_plan();
}

void stage_engine::apply_plan() {
  auto i = plans_.find(step_);
  if (i == plans_.end())
    return;
  queue_.expect(i->second.hops);
  step_tokens_ = i->second.tokens;
  maybe_reduce(step_); // norms that reached the reducer before its plan
  maybe_finish_step(); // a step with no work here
}

void stage_engine::push_input(int c, int mb) {
  auto& w = slot(c, mb);
  auto hops = static_cast<int>(w.route.size());
  if (w.hop + 1 == hops && !w.targets.defined())
    return; // the loss needs its targets too; on_batch pushes when they come
  int next = w.hop + 1 < hops ? w.route[static_cast<std::size_t>(w.hop + 1)].actor : -1;
  sched::hop_info info{w.hop, hops - w.hop, next == cfg_.actor ? -1 : next};
  if (auto r = queue_.push_forward(queue_.stage_of(c), mb, info); !r)
    throw std::runtime_error(fmt::format("{}: {}", cfg_.name, r.error().message));
}

void stage_engine::on_batch(const batch_msg& m, bool eval) {
  // Training work of a later step waits for this step's update; evaluation after
  // step s waits until step s's update is applied here.
  if (is_future(m.step, eval)) {
    hold({held::batch, eval, m, {}, {}});
    return;
  }
  if (m.route.empty())
    throw std::runtime_error(fmt::format("{}: a batch for step {} microbatch {} without a route", cfg_.name, m.step,
                                         m.microbatch));
  int last = static_cast<int>(m.route.size()) - 1;
  bool has_tokens = m.tokens.defined(), has_targets = m.targets.defined();
  if (has_targets)
    chunk_of_hop(m.route, last); // checks that the loss hop is here
  if (eval) {
    if (has_targets)
      eval_targets_[m.microbatch] = m.targets;
    if (has_tokens)
      run_eval(m.route, 0, m.microbatch, {m.tokens, nullptr}, m.step);
    else if (auto i = eval_inputs_.find(m.microbatch); has_targets && i != eval_inputs_.end()) {
      auto [route, act] = std::move(i->second);
      eval_inputs_.erase(i);
      run_eval(route, last, m.microbatch, act, m.step);
    }
    return;
  }
  if (has_targets) {
    int c = m.route.back().chunk;
    auto& w = slot(c, m.microbatch);
    w.targets = m.targets;
    if (!has_tokens && w.hop == last)
      push_input(c, m.microbatch); // the activation came first
  }
  if (has_tokens) {
    int c = chunk_of_hop(m.route, 0);
    auto& w = slot(c, m.microbatch);
    w.route = m.route, w.hop = 0, w.input = {m.tokens, nullptr};
    push_input(c, m.microbatch);
  }
}

void stage_engine::on_activation(const activation_msg& m, bool eval) {
  if (is_future(m.step, eval)) {
    hold({held::activation, eval, {}, m, {}});
    return;
  }
  int c = chunk_of_hop(m.route, m.hop);
  if (eval) {
    if (m.hop + 1 == static_cast<int>(m.route.size()) && !eval_targets_.contains(m.microbatch))
      eval_inputs_[m.microbatch] = {m.route, {m.activation, m.ready}};
    else
      run_eval(m.route, m.hop, m.microbatch, {m.activation, m.ready}, m.step);
    return;
  }
  auto& w = slot(c, m.microbatch);
  w.route = m.route, w.hop = m.hop, w.input = {m.activation, m.ready};
  push_input(c, m.microbatch);
}

void stage_engine::on_gradient(const gradient_msg& m) {
  if (is_future(m.step, false)) {
    hold({held::gradient, false, {}, {}, m});
    return;
  }
  int c = chunk_of_hop(m.route, m.hop);
  slot(c, m.microbatch).grad = {m.gradient, m.ready};
  if (auto r = queue_.push_backward(queue_.stage_of(c), m.microbatch); !r)
    throw std::runtime_error(fmt::format("{}: {}", cfg_.name, r.error().message));
}

void stage_engine::on_credit(const credit_msg& m) {
  queue_.grant(m.from, m.count);
}

void stage_engine::run_eval(const route_t& route, int hop, int k, const stage_tensor& input, step_t step) {
  int c = chunk_of_hop(route, hop);
  bool last = hop + 1 == static_cast<int>(route.size());
  stage_tensor y;
  {
    scoped_span s(trace_id, span_kind::eval, static_cast<std::int32_t>(step), k);
    auto t0 = trace_now();
    y = chunk(c).evaluate(input, last ? eval_targets_.at(k) : tensor_handle{});
    compute_ns_ += trace_now() - t0;
  }
  if (last) {
    eval_targets_.erase(k);
    eval_sum_ += static_cast<double>(y.value.data<float>()[0]);
    if (++eval_seen_ == cfg_.eval_batches) {
      val_losses_.emplace_back(step, eval_sum_ / cfg_.eval_batches);
      trace_recorder::global().count("val_loss", val_losses_.back().second, static_cast<std::int32_t>(step));
      eval_sum_ = 0, eval_seen_ = 0;
    }
    return;
  }
  activation_msg next{step, k, hop + 1, y.value, route, y.ready};
  int to = route[static_cast<std::size_t>(hop + 1)].actor;
  if (to == cfg_.actor)
    on_activation(next, true);
  else
    out_.eval(to, next);
}

namespace {
double seconds_now() {
  return static_cast<double>(trace_now()) * 1e-9;
}
} // namespace

std::optional<double> stage_engine::wake_in() const {
  if (awaiting_total_ || training_done())
    return std::nullopt;
  auto t = policy_->wake_at(queue_);
  if (!t)
    return std::nullopt;
  return std::max(0.0, *t - seconds_now());
}

bool stage_engine::run_one() {
  if (awaiting_total_ || training_done())
    return false;
  queue_.set_now(seconds_now());
  auto a = policy_->next(queue_);
  if (!a) {
    if (idle_since_ns_ < 0)
      idle_since_ns_ = trace_now();
    return false;
  }
  if (idle_since_ns_ >= 0) { // the bubble this rank just sat in, for traces
    span idle;
    idle.actor = trace_id, idle.kind = span_kind::idle, idle.step = static_cast<std::int32_t>(step_);
    idle.begin_ns = idle_since_ns_, idle.end_ns = trace_now();
    trace_recorder::global().record(idle);
    idle_since_ns_ = -1;
  }
  execute(*a);
  maybe_finish_step();
  return true;
}

void stage_engine::execute(const sched::action& a) {
  queue_.set_now(seconds_now());
  if (auto r = queue_.start(a); !r)
    throw std::runtime_error(fmt::format("{}: policy {} chose {}: {}", cfg_.name, policy_->name(),
                                         sched::to_string(a), r.error().message));
  scoped_span s(trace_id, span_of(a.kind), static_cast<std::int32_t>(step_), a.microbatch);
  auto t0 = trace_now();
  int c = queue_.chunk_of(a.stage);
  auto& w = slot(c, a.microbatch);
  auto& model = chunk(c);
  int hops = static_cast<int>(w.route.size());
  bool last = w.hop + 1 == hops;
  stage_tensor out;
  if (a.kind == sched::op_kind::forward) {
    // The input's buffer is free once the forward starts: give its sender the credit back.
    return_credit(w.hop == 0 ? cfg_.router : w.route[static_cast<std::size_t>(w.hop - 1)].actor);
    auto input = take(w.input, "input", cfg_.name);
    if (last) {
      if (w.hop != 0)
        return_credit(cfg_.router); // the targets' buffer too (with tokens, one message held both)
      auto loss = model.forward(a.microbatch, input, w.targets);
      double v = loss.value.data<float>()[0];
      if (!std::isfinite(v))
        throw std::runtime_error(fmt::format("{}: the loss is {} at step {} microbatch {} (lr {:.3g}); lower "
                                             "train.lr or raise train.warmup",
                                             cfg_.name, v, step_, a.microbatch, cfg_.lr.at(step_)));
      loss_sum_ += v * static_cast<double>(w.targets.numel());
    } else {
      out = model.forward(a.microbatch, input, {});
    }
  } else if (a.kind == sched::op_kind::weight_grad) {
    model.backward_weight(a.microbatch);
  } else {
    stage_tensor g;
    if (last) { // d(step loss)/d(this microbatch's mean loss): its share of the step's tokens
      if (step_tokens_ <= 0)
        throw std::runtime_error(fmt::format("{}: step {} has no tokens in its plan", cfg_.name, step_));
      g.value = tensor_handle::empty({1});
      g.value.data<float>()[0] =
        static_cast<float>(static_cast<double>(w.targets.numel()) / static_cast<double>(step_tokens_));
      w.targets = {};
    } else {
      g = take(w.grad, "gradient", cfg_.name);
    }
    out = a.kind == sched::op_kind::backward ? model.backward(a.microbatch, g) : model.backward_input(a.microbatch, g);
  }
  compute_ns_ += trace_now() - t0;
  queue_.set_now(seconds_now());
  if (auto r = queue_.finish(a); !r)
    throw std::runtime_error(fmt::format("{}: {}", cfg_.name, r.error().message));
  if (!out.defined())
    return;
  s.get().bytes = out.value.nbytes();
  if (a.kind == sched::op_kind::forward) {
    activation_msg m{step_, a.microbatch, w.hop + 1, out.value, w.route, out.ready};
    int to = w.route[static_cast<std::size_t>(w.hop + 1)].actor;
    if (to == cfg_.actor)
      on_activation(m, false);
    else
      out_.forward(to, m);
  } else if (w.hop > 0) {
    gradient_msg m{step_, a.microbatch, w.hop - 1, out.value, w.route, out.ready};
    int to = w.route[static_cast<std::size_t>(w.hop - 1)].actor;
    if (to == cfg_.actor)
      on_gradient(m);
    else
      out_.backward(to, m);
  }
}

void stage_engine::maybe_finish_step() {
  if (awaiting_total_ || training_done() || !queue_.step_complete())
    return;
  if (out_.before_update)
    out_.before_update(step_, chunks_);
  const auto& plan = plans_.at(step_);
  own_sq_ = 0;
  if (cfg_.grad_clip > 0)
    for (auto& m : models_)
      own_sq_ += m->grad_sq_norm();
  if (cfg_.grad_clip <= 0 || plan.participants <= 1) {
    finish_step(own_sq_);
    return;
  }
  // Global-norm clipping is a reduction: every participant sends its Σ g² to
  // the reducer, which answers each with the total (2(n-1) messages a step).
  awaiting_total_ = true;
  if (plan.reducer == cfg_.actor)
    on_norm(step_, own_sq_, cfg_.actor);
  else
    out_.norm(plan.reducer, step_, own_sq_);
}

void stage_engine::on_norm(step_t step, double sq_norm, int from) {
  auto& r = norms_[step];
  ++r.heard, r.sum += sq_norm;
  if (from != cfg_.actor)
    r.from.push_back(from);
  maybe_reduce(step);
}

void stage_engine::maybe_reduce(step_t step) {
  auto r = norms_.find(step);
  auto plan = plans_.find(step);
  if (r == norms_.end() || plan == plans_.end() || r->second.heard < plan->second.participants)
    return;
  if (plan->second.reducer != cfg_.actor)
    throw std::runtime_error(fmt::format("{}: gradient norms for step {} reached a stage that is not its reducer",
                                         cfg_.name, step));
  for (int to : r->second.from)
    out_.clip(to, step, r->second.sum);
  double total = r->second.sum;
  norms_.erase(r);
  on_clip(step, total);
}

void stage_engine::on_clip(step_t step, double total_sq) {
  totals_[step] = total_sq;
  if (awaiting_total_ && step == step_)
    finish_step(total_sq);
}

void stage_engine::finish_step(double total_sq) {
  scoped_span s(trace_id, span_kind::optimizer, static_cast<std::int32_t>(step_));
  auto t0 = trace_now();
  step_report rep{step_, step_tokens_ > 0 ? loss_sum_ / static_cast<double>(step_tokens_) : 0.0, 0,
                  cfg_.lr.at(step_)};
  if (cfg_.grad_clip > 0) {
    rep.grad_norm = std::sqrt(total_sq);
    if (!std::isfinite(rep.grad_norm))
      throw std::runtime_error(fmt::format("{}: the gradient norm is {} at step {} (lr {:.3g}); lower train.lr "
                                           "or raise train.warmup",
                                           cfg_.name, rep.grad_norm, step_, rep.lr));
    if (auto f = ops::clip_factor(rep.grad_norm, cfg_.grad_clip); f < 1.0f)
      for (auto& m : models_)
        m->scale_grads(f);
  }
  for (std::size_t k = 0; k < models_.size(); ++k) {
    auto& m = *models_[k];
    optimizers_[k]->step(m.params(), m.grads(), rep.lr);
    m.params_updated();
    m.zero_grads();
  }
  compute_ns_ += trace_now() - t0;
  if (cfg_.loss) {
    reports_.push_back(rep);
    trace_recorder::global().count("loss", rep.loss, static_cast<std::int32_t>(step_));
  }
  totals_.erase(step_);
  plans_.erase(step_);
  awaiting_total_ = false;
  loss_sum_ = 0;
  step_tokens_ = 0;
  queue_.reset();
  for (auto& chunk_work : work_)
    for (auto& w : chunk_work)
      w.hop = -1, w.input = {}, w.grad = {}, w.targets = {};
  ++step_;
  if (checkpoint_due(step_, cfg_.checkpoint_every, cfg_.steps) && out_.checkpoint)
    out_.checkpoint(step_);
  apply_plan();
  release_held();
}

std::vector<named_handle> stage_engine::checkpoint_tensors() {
  std::vector<named_handle> out;
  for (std::size_t k = 0; k < models_.size(); ++k) {
    auto params = models_[k]->host_params();
    auto st = optimizers_[k]->state(); // per parameter, each of its kinds
    auto kinds = optimizers_[k]->state_kinds().size();
    for (std::size_t i = 0; i < params.size(); ++i) {
      out.push_back({params[i].name, params[i].value});
      for (std::size_t j = i * kinds; j < (i + 1) * kinds && j < st.tensors.size(); ++j)
        out.push_back({"optimizer." + st.tensors[j].name, st.tensors[j].value});
    }
  }
  return out;
}

std::map<std::string, std::string> stage_engine::checkpoint_metadata() {
  std::string steps;
  for (auto& o : optimizers_)
    steps += fmt::format("{}{}", steps.empty() ? "" : ",", o->steps());
  return {{"optimizer.steps", steps}};
}

caf::error stage_engine::restore(const safetensors_file& f, step_t steps_done, const std::string& file) {
  auto bad = [&](std::string what) { return make_error(errc::invalid_argument, fmt::format("{}: {}", file, what)); };
  // Check everything first, so a mismatch changes nothing.
  std::size_t expected = 0;
  std::vector<long> opt_steps;
  auto md = f.metadata.find("optimizer.steps");
  if (md == f.metadata.end())
    return bad("no 'optimizer.steps' in the metadata");
  for (std::size_t at = 0; at <= md->second.size();) {
    auto comma = std::min(md->second.find(',', at), md->second.size());
    opt_steps.push_back(std::atol(md->second.substr(at, comma - at).c_str()));
    at = comma + 1;
  }
  if (opt_steps.size() != models_.size())
    return bad(fmt::format("optimizer state for {} model chunks, this stage has {}", opt_steps.size(),
                           models_.size()));
  std::vector<std::vector<param_info>> layouts;
  for (std::size_t k = 0; k < models_.size(); ++k) {
    layouts.push_back(models_[k]->param_layout());
    for (const auto& p : layouts.back()) {
      std::vector<std::string> names{p.name};
      if (opt_steps[k] > 0) // no update yet: no optimizer state
        for (const auto& kind : optimizers_[k]->state_kinds())
          names.push_back("optimizer." + kind + "." + p.name);
      for (const auto& name : names) {
        auto t = f.find(name);
        if (!t.defined())
          return bad(fmt::format("tensor '{}' is missing", name));
        if (!(t.shape() == p.shape) || t.type() != p.type)
          return bad(fmt::format("tensor '{}' is {} {} in the checkpoint but {} {} in the graph's model", name,
                                 to_string(t.type()), to_string(t.shape()), to_string(p.type),
                                 to_string(p.shape)));
        ++expected;
      }
    }
  }
  if (f.tensors.size() != expected)
    return bad(fmt::format("holds {} tensors, this stage expects {} (a different model cut?)", f.tensors.size(),
                           expected));
  for (std::size_t k = 0; k < models_.size(); ++k) {
    std::vector<tensor_handle> ps;
    ops::optimizer_state st{opt_steps[k], {}};
    for (const auto& p : layouts[k]) {
      ps.push_back(f.find(p.name));
      if (opt_steps[k] > 0)
        for (const auto& kind : optimizers_[k]->state_kinds())
          st.tensors.push_back({kind + "." + p.name, f.find("optimizer." + kind + "." + p.name)});
    }
    try {
      models_[k]->load_params(ps);
      optimizers_[k]->load_state(st);
    } catch (const std::exception& e) { // a device that failed to take it
      return bad(e.what());
    }
  }
  step_ = steps_done;
  return {};
}

} // namespace troupe
