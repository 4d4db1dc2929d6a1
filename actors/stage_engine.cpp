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
  : cfg_(std::move(cfg)), out_(std::move(out)),
    queue_(cfg_.rank, cfg_.ranks, cfg_.microbatches, cfg_.chunks) {
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
  p.rank = cfg_.rank, p.ranks = cfg_.ranks, p.microbatches = cfg_.microbatches, p.chunks = cfg_.chunks;
  auto made = sched::make_policy(cfg_.policy, p);
  if (!made)
    throw std::invalid_argument(fmt::format("{}: {}", cfg_.name, made.error().message));
  policy_ = std::move(*made);
  auto slots = static_cast<std::size_t>(cfg_.chunks * cfg_.microbatches);
  inputs_.resize(slots);
  grads_.resize(slots);
  targets_.resize(static_cast<std::size_t>(cfg_.microbatches));
  loss_grad_ = tensor_handle::empty({1});
  loss_grad_.data<float>()[0] = 1.0f / static_cast<float>(cfg_.microbatches);
}

std::size_t stage_engine::slot(int stage, int mb) const {
  if (!queue_.owns(stage) || mb < 0 || mb >= cfg_.microbatches)
    throw std::runtime_error(fmt::format("{}: message for stage {} microbatch {}, but this rank owns other stages "
                                         "or a step has {} microbatches",
                                         cfg_.name, stage, mb, cfg_.microbatches));
  return static_cast<std::size_t>(stage / cfg_.ranks * cfg_.microbatches + mb);
}

bool stage_engine::owns_loss() const noexcept {
  return queue_.owns(queue_.stages() - 1);
}

void stage_engine::start() {
  if (cfg_.rank == 0 && cfg_.steps > 0)
    out_.credit(cfg_.microbatches);
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

void stage_engine::push_input(int stage, int mb) {
  if (queue_.is_last_stage(stage) && !targets_[slot(stage, mb) % static_cast<std::size_t>(cfg_.microbatches)].defined())
    return; // the loss needs its targets too; on_batch pushes when they come
  if (auto r = queue_.push_forward(stage, mb); !r)
    throw std::runtime_error(fmt::format("{}: {}", cfg_.name, r.error().message));
}

void stage_engine::on_batch(const batch_msg& m, bool eval) {
  // Training work of a later step waits for this step's update; evaluation after
  // step s waits until step s's update is applied here.
  if (is_future(m.step, eval)) {
    held_.push_back({held::batch, eval, m, {}, {}});
    return;
  }
  int last = queue_.stages() - 1;
  if (eval) {
    if (owns_loss())
      eval_targets_[m.microbatch] = m.targets;
    if (cfg_.rank == 0)
      run_eval(0, m.microbatch, {m.tokens, nullptr}, m.step);
    else if (auto i = eval_inputs_.find(m.microbatch); i != eval_inputs_.end()) {
      auto act = std::move(i->second);
      eval_inputs_.erase(i);
      run_eval(last, m.microbatch, act, m.step);
    }
    return;
  }
  if (owns_loss()) {
    targets_[static_cast<std::size_t>(m.microbatch)] = m.targets;
    if (inputs_[slot(last, m.microbatch)].defined())
      push_input(last, m.microbatch);
  }
  if (cfg_.rank == 0) {
    inputs_[slot(0, m.microbatch)] = {m.tokens, nullptr};
    push_input(0, m.microbatch);
  }
}

void stage_engine::on_activation(const activation_msg& m, bool eval) {
  if (is_future(m.step, eval)) {
    held_.push_back({held::activation, eval, {}, m, {}});
    return;
  }
  if (eval) {
    if (queue_.is_last_stage(m.stage) && !eval_targets_.contains(m.microbatch))
      eval_inputs_[m.microbatch] = {m.activation, m.ready};
    else
      run_eval(m.stage, m.microbatch, {m.activation, m.ready}, m.step);
    return;
  }
  inputs_[slot(m.stage, m.microbatch)] = {m.activation, m.ready};
  push_input(m.stage, m.microbatch);
}

void stage_engine::on_gradient(const gradient_msg& m) {
  if (is_future(m.step, false)) {
    held_.push_back({held::gradient, false, {}, {}, m});
    return;
  }
  grads_[slot(m.stage, m.microbatch)] = {m.gradient, m.ready};
  if (auto r = queue_.push_backward(m.stage, m.microbatch); !r)
    throw std::runtime_error(fmt::format("{}: {}", cfg_.name, r.error().message));
}

void stage_engine::run_eval(int stage, int k, const stage_tensor& input, step_t step) {
  bool last = queue_.is_last_stage(stage);
  stage_tensor y;
  {
    scoped_span s(trace_id, span_kind::eval, static_cast<std::int32_t>(step), k);
    auto t0 = trace_now();
    y = chunk(stage).evaluate(input, last ? eval_targets_.at(k) : tensor_handle{});
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
  activation_msg next{step, k, stage + 1, y.value, {}, y.ready};
  if (rank_of(stage + 1) == cfg_.rank)
    on_activation(next, true);
  else
    out_.eval(rank_of(stage + 1), next);
}

namespace {
double seconds_now() {
  return static_cast<double>(trace_now()) * 1e-9;
}
} // namespace

std::optional<double> stage_engine::wake_in() const {
  if (awaiting_norms_ || training_done())
    return std::nullopt;
  auto t = policy_->wake_at(queue_);
  if (!t)
    return std::nullopt;
  return std::max(0.0, *t - seconds_now());
}

bool stage_engine::run_one() {
  if (awaiting_norms_ || training_done())
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
  auto& c = chunk(a.stage);
  bool last = queue_.is_last_stage(a.stage);
  stage_tensor out;
  if (a.kind == sched::op_kind::forward) {
    auto input = take(inputs_[slot(a.stage, a.microbatch)], "input", cfg_.name);
    if (last) {
      auto loss = c.forward(a.microbatch, input, take(targets_[static_cast<std::size_t>(a.microbatch)], "targets", cfg_.name));
      double v = loss.value.data<float>()[0];
      if (!std::isfinite(v))
        throw std::runtime_error(fmt::format("{}: the loss is {} at step {} microbatch {} (lr {:.3g}); lower "
                                             "train.lr or raise train.warmup",
                                             cfg_.name, v, step_, a.microbatch, cfg_.lr.at(step_)));
      loss_sum_ += v;
    } else {
      out = c.forward(a.microbatch, input, {});
    }
    if (a.stage == 0 && ++forwards_started_ == cfg_.microbatches && step_ + 1 < cfg_.steps)
      out_.credit(cfg_.microbatches); // prefetch the next step's batches
  } else if (a.kind == sched::op_kind::weight_grad) {
    c.backward_weight(a.microbatch);
  } else {
    auto g = last ? stage_tensor{loss_grad_, nullptr} : take(grads_[slot(a.stage, a.microbatch)], "gradient", cfg_.name);
    out = a.kind == sched::op_kind::backward ? c.backward(a.microbatch, g) : c.backward_input(a.microbatch, g);
  }
  compute_ns_ += trace_now() - t0;
  queue_.set_now(seconds_now());
  if (auto r = queue_.finish(a); !r)
    throw std::runtime_error(fmt::format("{}: {}", cfg_.name, r.error().message));
  if (!out.defined())
    return;
  s.get().bytes = out.value.nbytes();
  if (a.kind == sched::op_kind::forward) {
    activation_msg m{step_, a.microbatch, a.stage + 1, out.value, {}, out.ready};
    if (rank_of(a.stage + 1) == cfg_.rank)
      on_activation(m, false);
    else
      out_.forward(rank_of(a.stage + 1), m);
  } else if (a.stage > 0) {
    gradient_msg m{step_, a.microbatch, a.stage - 1, out.value, {}, out.ready};
    if (rank_of(a.stage - 1) == cfg_.rank)
      on_gradient(m);
    else
      out_.backward(rank_of(a.stage - 1), m);
  }
}

void stage_engine::maybe_finish_step() {
  if (awaiting_norms_ || !queue_.step_complete())
    return;
  if (out_.before_update)
    out_.before_update(step_, chunks_);
  if (cfg_.grad_clip > 0 && cfg_.ranks > 1) {
    double sq = 0;
    for (auto& m : models_)
      sq += m->grad_sq_norm();
    awaiting_norms_ = true;
    out_.norm(step_, sq);
    on_norm(step_, sq);
    return;
  }
  finish_step();
}

void stage_engine::on_norm(step_t step, double sq_norm) {
  auto& [heard, sum] = norms_[step];
  ++heard, sum += sq_norm;
  if (awaiting_norms_ && step == step_ && heard == cfg_.ranks)
    finish_step();
}

void stage_engine::finish_step() {
  scoped_span s(trace_id, span_kind::optimizer, static_cast<std::int32_t>(step_));
  auto t0 = trace_now();
  step_report rep{step_, loss_sum_ / cfg_.microbatches, 0, cfg_.lr.at(step_)};
  if (cfg_.grad_clip > 0) {
    double sq = 0;
    if (cfg_.ranks > 1)
      sq = norms_[step_].second;
    else
      for (auto& m : models_)
        sq += m->grad_sq_norm();
    rep.grad_norm = std::sqrt(sq);
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
  if (owns_loss()) {
    reports_.push_back(rep);
    trace_recorder::global().count("loss", rep.loss, static_cast<std::int32_t>(step_));
  }
  norms_.erase(step_);
  awaiting_norms_ = false;
  loss_sum_ = 0;
  forwards_started_ = 0;
  queue_.reset();
  ++step_;
  if (checkpoint_due(step_, cfg_.checkpoint_every, cfg_.steps) && out_.checkpoint)
    out_.checkpoint(step_);
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
