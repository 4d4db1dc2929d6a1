// The pipeline stage's state machine: inputs and gradients in, one policy-chosen
// action at a time, the step boundary when every microbatch has its gradient.
#include "actors/stage/stage_engine.hpp"
#include "actors/stage/stage_engine_detail.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <set>
#include <stdexcept>
#include <thread>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "ops/adamw.hpp"
#include "ops/grad_clip.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/actor/outer_messages.hpp"
#include "actors/stage/pipeline_messages.hpp"
#include "runtime/trace/hang_watch.hpp"
#include "runtime/trace/trace.hpp"

namespace troupe {

using detail::span_of;

namespace {
double steady_seconds() {
  return static_cast<double>(trace_now()) * 1e-9;
}
} // namespace

stage_engine::stage_engine(stage_config cfg, stage_outbox out) : cfg_(std::move(cfg)), out_(std::move(out)) {
  if (static_cast<int>(cfg_.layers.size()) != cfg_.chunks)
    throw std::invalid_argument(
      fmt::format("{}: {} layer ranges for {} chunks", cfg_.name, cfg_.layers.size(), cfg_.chunks));
  if (cfg_.device.is_cpu()) {
    chunks_.reserve(cfg_.layers.size()); // models_ point into it
    for (auto [b, e] : cfg_.layers)
      models_.push_back(make_cpu_stage_model(chunks_.emplace_back(cfg_.model, b, e)));
  } else {
    for (auto [b, e] : cfg_.layers)
      models_.push_back(make_stage_model({cfg_.model, b, e, cfg_.device, cfg_.max_batch}));
  }
  boundaries_ = make_step_boundaries(*this, cfg_.boundaries);
  auto p = cfg_.policy_params;
  p.rank = cfg_.rank, p.ranks = cfg_.ranks, p.chunks = cfg_.chunks;
  auto made = sched::make_policy(cfg_.policy, p);
  if (!made)
    throw std::invalid_argument(fmt::format("{}: {}", cfg_.name, made.error().message));
  work_.resize(static_cast<std::size_t>(cfg_.chunks));

  sched::stage_core_config cc{cfg_.name,   cfg_.actor, cfg_.rank,          cfg_.ranks,        cfg_.chunks,
                              cfg_.router, cfg_.steps, cfg_.grad_clip > 0, cfg_.input_credits};
  cc.next_replicas = cfg_.next_replicas, cc.hop_reporters = cfg_.hop_reporters, cc.targets_travel = cfg_.targets_travel;
  cc.post_validate = cfg_.post_validate && cfg_.grad_clip > 0;
  sched::stage_core_hooks h;
  h.clock = cfg_.clock ? cfg_.clock : std::function<double()>{steady_seconds};
  // A local hand-off keeps the output here, as the input (or gradient) of the chunk of the next (previous) hop.
  auto hand_off = [this](int to, const sched::msg_meta& m, stage_tensor tensors::*local, auto send) {
    auto out = std::exchange(outputs_[local == &tensors::input ? 0 : 1], {});
    if (to == cfg_.actor)
      slot(m.route[static_cast<std::size_t>(m.hop)].chunk, m.microbatch).*local = std::move(out);
    else
      send(out);
  };
  h.forward = [this, hand_off](int to, const sched::msg_meta& m) {
    auto& from = slot(m.route[static_cast<std::size_t>(m.hop - 1)].chunk, m.microbatch);
    from.sent = outputs_[0].value.shape();
    tensor_handle targets; // routed on the way, the loss stage gets its targets with the activation
    if (cfg_.targets_travel)
      targets = std::exchange(from.targets, {});
    hand_off(to, m, &tensors::input, [&](const stage_tensor& t) {
      send(to, caf::make_message(forward_atom::value,
                                 activation_msg{m.step, m.microbatch, m.hop,
                                                cfg_.wire_bf16 ? detail::narrow_bf16(t.value) : t.value, m.route,
                                                t.ready, t.documents, t.round_documents, targets}));
    });
  };
  h.backward = [this, hand_off](int to, const sched::msg_meta& m) {
    hand_off(to, m, &tensors::grad, [&](const stage_tensor& t) {
      send(to,
           caf::make_message(backward_atom::value,
                             gradient_msg{m.step, m.microbatch, m.hop,
                                          cfg_.wire_bf16 ? detail::narrow_bf16(t.value) : t.value, m.route, t.ready}));
    });
  };
  h.credit = [this](int to, int count) {
    auto load = core_->load(); // least_loaded senders route by it; others ignore it
    send(to, caf::make_message(credit_atom::value, credit_msg{count, cfg_.actor, load.backlog_s, load.cost_s}));
  };
  h.hops = [this](int to, std::int64_t step, int count) {
    send(to, caf::make_message(hops_atom::value, step_t{step}, std::int32_t{cfg_.actor}, std::int32_t{count}));
  };
  h.norm = [this](int reducer, std::int64_t step, double sq) {
    send(reducer, caf::make_message(norm_atom::value, step_t{step}, sq, std::int32_t{cfg_.actor}));
  };
  h.clip = [this](int to, std::int64_t step, double total) {
    send(to, caf::make_message(clip_atom::value, step_t{step}, total));
  };
  h.gradients_complete = [this](std::int64_t step) { return gradients_complete(step); };
  h.sync = [this](std::int64_t step) {
    next_sync_ = 0, syncing_ = true;
    return run_syncs(step);
  };
  h.update = [this](std::int64_t step, double total_sq) { update(step, total_sq); };
  h.update_early = [this](std::int64_t step) { update_early(step); };
  h.exchange = [this](std::int64_t steps_done) {
    if (awaiting_update_ >= 0) { // the exchange reads the updated parameters: once they are back
      pending_exchange_ = steps_done;
      return false;
    }
    return exchange(steps_done);
  };
  h.updated = [this](std::int64_t steps_done) {
    if (checkpoint_due(steps_done, cfg_.checkpoint_every, cfg_.steps) && out_.checkpoint) {
      if (awaiting_update_ >= 0)
        pending_checkpoint_ = steps_done; // once the shard's parameters are back
      else
        out_.checkpoint(steps_done);
    }
  };
  core_ = std::make_unique<sched::stage_core>(std::move(cc), std::move(*made), std::move(h));
  cfg_.input_credits = core_->config().input_credits; // with the defaults filled in
  if (!cfg_.attention.servers.empty()) {
    if (chunks_.empty())
      throw std::invalid_argument(
        fmt::format("{}: attention servers run on the CPU for now, not {}", cfg_.name, to_string(cfg_.device)));
    stage_attention::hooks ah;
    ah.send = [this](int server, const attention_task_msg& m) {
      send(server, caf::make_message(attention_atom::value, m));
    };
    ah.begin_backward_piece = [this](bool last) {
      if (pieces_weight_pass_) // buckets go once every nano-batch has added its part
        for (auto& b : boundaries_)
          b->begin_pass(pieces_task_.step, pieces_task_.chunk, pass_last_ && last);
    };
    ah.end_backward_piece = [this] {
      if (pieces_weight_pass_)
        end_weight_pass();
    };
    auto ac = cfg_.attention;
    ac.actor = cfg_.actor, ac.heads = cfg_.model.heads;
    attention_ = std::make_unique<stage_attention>(std::move(ac), std::move(ah));
  }
}

stage_engine::tensors& stage_engine::slot(int chunk, int mb) {
  return sched::chunk_slot(work_, chunk, mb, cfg_.name);
}

stage_engine::~stage_engine() = default;

void stage_engine::start() {
  started_ = true;
  for (auto& b : boundaries_)
    b->start();
  core_->start();
}

void stage_engine::add_step_boundary(std::unique_ptr<step_boundary> b) {
  boundaries_.insert(boundaries_.begin(), std::move(b));
}

void stage_engine::on_plan(const step_plan_msg& m) {
  if (hold_for_params([this, m] { on_plan(m); }))
    return;
  plan_hops_[m.step] = m.hops;
  core_->on_plan(m);
}

bool stage_engine::hold_for_params(std::function<void()> replay) {
  if (awaiting_update_ < 0)
    return false;
  params_held_.push_back(std::move(replay));
  return true;
}

void stage_engine::on_boundary_message(const caf::message& m) {
  for (auto& b : boundaries_)
    if (b->receive(m))
      return;
  throw std::runtime_error(fmt::format("{}: no step-boundary component takes the message {}", cfg_.name, to_string(m)));
}

void stage_engine::on_message(const caf::message& m) {
  if (m.match_elements<plan_atom, step_plan_msg>())
    on_plan(m.get_as<step_plan_msg>(1));
  else if (m.match_elements<forward_atom, batch_msg>() || m.match_elements<eval_atom, batch_msg>())
    on_batch(m.get_as<batch_msg>(1), m.match_element<eval_atom>(0));
  else if (m.match_elements<forward_atom, activation_msg>() || m.match_elements<eval_atom, activation_msg>())
    on_activation(m.get_as<activation_msg>(1), m.match_element<eval_atom>(0));
  else if (m.match_elements<backward_atom, gradient_msg>())
    on_gradient(m.get_as<gradient_msg>(1));
  else if (m.match_elements<credit_atom, credit_msg>())
    on_credit(m.get_as<credit_msg>(1));
  else if (m.match_elements<norm_atom, step_t, double, std::int32_t>())
    on_norm(m.get_as<step_t>(1), m.get_as<double>(2), m.get_as<std::int32_t>(3));
  else if (m.match_elements<clip_atom, step_t, double>())
    on_clip(m.get_as<step_t>(1), m.get_as<double>(2));
  else if (m.match_elements<hops_atom, step_t, std::int32_t, std::int32_t>())
    on_hops(m.get_as<step_t>(1), m.get_as<std::int32_t>(2), m.get_as<std::int32_t>(3));
  else if (m.match_elements<attention_atom, attention_result_msg>())
    on_attention_result(m.get_as<attention_result_msg>(1));
  else if (m.match_elements<replica_lost_atom, std::int32_t>())
    on_replica_lost(m.get_as<std::int32_t>(1));
  else if (m.match_elements<rejoin_atom, rejoin_msg>() && !cfg_.stage_replicas.empty())
    on_rejoin(m);
  else if (m.match_elements<attention_atom, attention_task_msg>()) { // in place: another stage's shard, answered now
    const auto& task = m.get_as<attention_task_msg>(1);
    attention_result_msg r;
    {
      scoped_span s(trace_id, span_kind::attention, static_cast<std::int32_t>(task.key.step), task.key.microbatch);
      r = serve_attention(task);
      s.get().bytes =
        r.out.defined() ? r.out.nbytes() : 0; // a forward's answer: its queries' outputs (0 for a backward)
    }
    send(task.key.from, caf::make_message(attention_atom::value, std::move(r)));
  } else
    on_boundary_message(m);
}

void stage_engine::send(int to, caf::message m) {
  // A lost replica's stage (elastic least_loaded) takes nothing but the state it
  // rejoins with, which its donor sends before the step that takes it back.
  if (core_ && core_->is_lost(to) && !m.match_element<state_atom>(0))
    return;
  if (!out_.send)
    throw std::runtime_error(fmt::format("{}: a message to actor {} with nowhere to go", cfg_.name, to));
  out_.send(to, std::move(m));
}

bool stage_engine::run_syncs(step_t step) {
  while (next_sync_ < boundaries_.size())
    if (!boundaries_[next_sync_++]->sync(step))
      return false;
  syncing_ = false;
  return true;
}

void stage_engine::synced(step_t step) {
  if (syncing_ && run_syncs(step))
    core_->on_synced(step);
}

bool stage_engine::exchange(step_t steps_done) {
  exchanges_out_ = 0;
  for (auto& b : boundaries_)
    exchanges_out_ += !b->after_update(steps_done);
  return exchanges_out_ == 0;
}

void stage_engine::exchanged() {
  if (exchanges_out_ > 0 && --exchanges_out_ == 0)
    core_->on_exchanged();
}

std::vector<tensor_handle> stage_engine::optimizer_state(std::string_view kind) const {
  for (const auto& b : boundaries_)
    if (auto s = b->state_of(kind))
      return *s;
  throw std::runtime_error(fmt::format("{}: the optimizer keeps no '{}'", cfg_.name, kind));
}

void stage_engine::applied(step_t step) {
  if (step != awaiting_update_)
    throw std::runtime_error(
      fmt::format("{}: the update of step {} came back, which this stage was not waiting for", cfg_.name, step));
  awaiting_update_ = -1;
  finish_update(pending_report_, pending_tokens_);
  if (pending_exchange_ >= 0 && exchange(std::exchange(pending_exchange_, -1)))
    core_->on_exchanged(); // nothing to wait for: the next step goes on
  if (pending_checkpoint_ >= 0 && out_.checkpoint)
    out_.checkpoint(std::exchange(pending_checkpoint_, -1));
  auto held = std::exchange(params_held_, {});
  for (auto& replay : held)
    replay();
}

void stage_engine::report_replica_loss(step_t step) {
  if (cfg_.loss && cfg_.replicas > 1 && own_tokens_ > 0)
    trace_recorder::global().count(fmt::format("loss:r{}", cfg_.replica),
                                   own_loss_sum_ / static_cast<double>(own_tokens_), static_cast<std::int32_t>(step));
  own_loss_sum_ = 0, own_tokens_ = 0;
}

held_bytes stage_engine::held() const {
  held_bytes h;
  for (std::size_t k = 0; k < models_.size(); ++k) {
    std::int64_t params = 0;
    for (const auto& p : models_[k]->params())
      params += static_cast<std::int64_t>(p.value.nbytes());
    h.params += params;
    for (const auto& g : models_[k]->grads())
      if (g.value.defined()) // ZeRO-2 gives them back between steps
        h.grads += static_cast<std::int64_t>(g.value.nbytes());
  }
  for (const auto& b : boundaries_)
    h.optimizer += b->optimizer_bytes();
  return h;
}

/// Before a weight-gradient pass: whether it is the step's last over its chunk
/// (each route of a replica visits each chunk once, so a chunk sees hops / chunks).
bool stage_engine::begin_weight_pass(const sched::stage_task& task) {
  const auto& t = task.parts.empty() ? task : task.parts.back(); // an F&B's backward
  if (t.what.kind != sched::op_kind::backward && t.what.kind != sched::op_kind::weight_grad)
    return false;
  if (passes_step_ != t.step)
    passes_step_ = t.step, weight_passes_.assign(static_cast<std::size_t>(cfg_.chunks), 0);
  auto hops = plan_hops_.find(t.step);
  int planned = hops == plan_hops_.end() ? -1 : hops->second;
  if (planned < 0) // routed on the way: the senders' reports, once all are in
    planned = core_->queue().planned();
  int per_chunk = planned < 0 ? -1 : planned / cfg_.chunks;
  bool last = ++weight_passes_[static_cast<std::size_t>(t.chunk)] == per_chunk;
  pass_last_ = last;
  for (auto& b : boundaries_)
    b->begin_pass(t.step, t.chunk, last);
  return true;
}

void stage_engine::end_weight_pass() {
  for (auto& b : boundaries_)
    b->end_pass();
}

void stage_engine::on_batch(const batch_msg& m, bool eval) {
  if (hold_for_params([this, m, eval] { on_batch(m, eval); }))
    return;
  // Training work of a later step waits for this step's update; evaluation after
  // step s waits until step s's update is applied here.
  if (!core_->admit(m.step, eval, [this, m, eval] { on_batch(m, eval); }))
    return;
  if (m.route.empty())
    throw std::runtime_error(
      fmt::format("{}: a batch for step {} microbatch {} without a route", cfg_.name, m.step, m.microbatch));
  int last = static_cast<int>(m.route.size()) - 1;
  bool has_tokens = m.tokens.defined(), has_targets = m.targets.defined();
  bool travelling = cfg_.targets_travel && !eval && has_tokens && last > 0;
  if (has_targets && !travelling)
    core_->chunk_of_hop(m.route, last); // checks that the loss hop is here
  if (eval) {
    if (has_targets)
      eval_targets_[m.microbatch] = m.targets;
    if (has_tokens)
      run_eval(m.route, 0, m.microbatch, {m.tokens, nullptr, m.documents}, m.step);
    else if (auto i = eval_inputs_.find(m.microbatch); has_targets && i != eval_inputs_.end()) {
      auto [route, act] = std::move(i->second);
      eval_inputs_.erase(i);
      run_eval(route, last, m.microbatch, act, m.step);
    }
    return;
  }
  if (has_targets) // travelling targets wait with the tokens' chunk until its output leaves
    slot(travelling ? core_->chunk_of_hop(m.route, 0) : m.route.back().chunk, m.microbatch).targets = m.targets;
  if (has_tokens)
    slot(core_->chunk_of_hop(m.route, 0), m.microbatch).input = {m.tokens, nullptr, m.documents, m.round_documents};
  core_->on_batch({m.step, m.microbatch, 0, m.route}, has_tokens, has_targets && !travelling);
}

void stage_engine::on_activation(const activation_msg& m, bool eval) {
  if (m.hop > 0 && m.hop <= static_cast<int>(m.route.size()) &&
      core_->drops_from(m.route[static_cast<std::size_t>(m.hop - 1)].actor, m.step))
    return; // from a lost replica's stage: counted as far as it came (on_replica_lost)
  if (hold_for_params([this, m, eval] { on_activation(m, eval); }))
    return;
  if (!core_->admit(m.step, eval, [this, m, eval] { on_activation(m, eval); }))
    return;
  int c = core_->chunk_of_hop(m.route, m.hop);
  if (eval) {
    if (m.hop + 1 == static_cast<int>(m.route.size()) && !eval_targets_.contains(m.microbatch))
      eval_inputs_[m.microbatch] = {m.route, {m.activation, m.ready, m.documents}};
    else
      run_eval(m.route, m.hop, m.microbatch, {m.activation, m.ready, m.documents}, m.step);
    return;
  }
  slot(c, m.microbatch).input = {m.activation, m.ready, m.documents, m.round_documents};
  if (m.targets.defined())
    slot(c, m.microbatch).targets = m.targets;
  core_->on_activation({m.step, m.microbatch, m.hop, m.route});
}

void stage_engine::on_gradient(const gradient_msg& m) {
  if (m.hop + 1 < static_cast<int>(m.route.size()) && m.hop >= 0 &&
      core_->drops_from(m.route[static_cast<std::size_t>(m.hop + 1)].actor, m.step))
    return; // from a lost replica's stage: the microbatch took a zero gradient instead
  if (hold_for_params([this, m] { on_gradient(m); }))
    return;
  if (!core_->admit(m.step, false, [this, m] { on_gradient(m); }))
    return;
  slot(core_->chunk_of_hop(m.route, m.hop), m.microbatch).grad = {m.gradient, m.ready};
  core_->on_gradient({m.step, m.microbatch, m.hop, m.route});
}

void stage_engine::on_credit(const credit_msg& m) {
  core_->on_credit(m.from, m.count, {m.backlog_s, m.cost_s}); // a lost stage's: void, or kept for its rejoin
}

void stage_engine::on_hops(step_t step, int from, int count) {
  if (!core_->drops_from(from, step))
    core_->on_hops(step, from, count);
}

void stage_engine::on_replica_lost(int replica) {
  if (hold_for_params([this, replica] { on_replica_lost(replica); }))
    return;
  std::set<int> lost;
  for (auto [actor, r] : cfg_.stage_replicas)
    if (r == replica)
      lost.insert(actor);
  ++replica_losses_[replica];
  if (lost.empty())
    throw std::runtime_error(fmt::format("{}: replica {} left the run, but this stage knows no stage of it "
                                         "(only an elastic least_loaded run tells its stages)",
                                         cfg_.name, replica));
  auto backed_out = core_->drop_actors(lost);
  // One line a stage: what the loss cost this step here (the launch names the
  // replica and its node). A rejoining stage told of a replica out before it starts has nothing to say.
  if (started_)
    fmt::print("{}: replica {} left in step {}: {} microbatch(es) sent to its stages backed out with zero gradients\n",
               cfg_.name, replica, core_->step() + 1, backed_out.size());
  std::fflush(stdout);
  for (const auto& m : backed_out) {
    auto& w = slot(m.route[static_cast<std::size_t>(m.hop)].chunk, m.microbatch);
    if (w.sent.rank() == 0)
      throw std::runtime_error(fmt::format("{}: step {} microbatch {} went to a lost stage, but its shape was not "
                                           "kept",
                                           cfg_.name, m.step, m.microbatch));
    w.grad = {tensor_handle::zeros(w.sent), nullptr};
    core_->on_gradient({m.step, m.microbatch, m.hop, m.route});
  }
}

void stage_engine::on_rejoin(const caf::message& m) {
  if (hold_for_params([this, m] { on_rejoin(m); }))
    return;
  const auto& r = m.get_as<rejoin_msg>(1);
  if (replica_losses_[r.replica] > r.losses)
    return; // lost again since the loader decided: it stays out
  std::set<int> back;
  for (auto [actor, replica] : cfg_.stage_replicas)
    if (replica == r.replica && actor != cfg_.actor)
      back.insert(actor);
  core_->add_actors(back, r.steps);
  fmt::print("{}: replica {} rejoins at step {}: its stages are routed to again from then\n", cfg_.name, r.replica,
             r.steps + 1);
  std::fflush(stdout);
  if (r.to >= 0) // this stage is the donor: its step-boundary components send the joiner its state
    on_boundary_message(m);
}

void stage_engine::on_norm(step_t step, double sq_norm, int from) {
  core_->on_norm(step, sq_norm, from);
}

void stage_engine::on_clip(step_t step, double total_sq) {
  core_->on_clip(step, total_sq);
}

void stage_engine::run_eval(const route_t& route, int hop, int k, const stage_tensor& input, step_t step) {
  int c = core_->chunk_of_hop(route, hop);
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
    auto routes = static_cast<std::size_t>(std::max(cfg_.eval_routes, 1));
    eval_sum_.resize(routes, 0.0), eval_seen_.resize(routes, 0);
    if (step != std::exchange(eval_step_, step)) // a pass that lost batches with a replica is not mixed in
      std::fill(eval_sum_.begin(), eval_sum_.end(), 0.0), std::fill(eval_seen_.begin(), eval_seen_.end(), 0);
    auto v = std::min(static_cast<std::size_t>(k / cfg_.eval_batches), routes - 1);
    eval_sum_[v] += static_cast<double>(y.value.data<float>()[0]);
    ++eval_seen_[v];
    if (std::all_of(eval_seen_.begin(), eval_seen_.end(), [&](int n) { return n == cfg_.eval_batches; })) {
      if (routes > 1) { // recorded first: a pass is complete once val_losses_ has it
        short_val_losses_.emplace_back(step, eval_sum_[1] / cfg_.eval_batches);
        trace_recorder::global().count("val_loss_short", short_val_losses_.back().second,
                                       static_cast<std::int32_t>(step));
      }
      val_losses_.emplace_back(step, eval_sum_[0] / cfg_.eval_batches);
      trace_recorder::global().count("val_loss", val_losses_.back().second, static_cast<std::int32_t>(step));
      std::fill(eval_sum_.begin(), eval_sum_.end(), 0.0), std::fill(eval_seen_.begin(), eval_seen_.end(), 0);
    }
    return;
  }
  activation_msg next{step, k, hop + 1, y.value, route, y.ready, y.documents};
  int to = route[static_cast<std::size_t>(hop + 1)].actor;
  if (to == cfg_.actor)
    on_activation(next, true);
  else
    send(to, caf::make_message(eval_atom::value, std::move(next)));
}

std::optional<double> stage_engine::wake_in() const {
  return core_->wake_in();
}

bool stage_engine::run_one() {
  if (attention_ && attention_->busy()) { // an action in pieces: its next ready piece
    scoped_span s(trace_id, span_of(pieces_task_.what.kind), static_cast<std::int32_t>(pieces_task_.step),
                  pieces_task_.what.microbatch);
    auto t0 = trace_now();
    bool ran = attention_->run_ready();
    compute_ns_ += trace_now() - t0;
    if (ran && !attention_->busy())
      finish_pieces();
    return ran;
  }
  if (awaiting_update_ >= 0)
    return false;
  auto t = core_->begin();
  if (!t) {
    if (idle_since_ns_ < 0 && !training_done() && !core_->awaiting_total() && !core_->awaiting_sync())
      idle_since_ns_ = trace_now();
    return false;
  }
  if (idle_since_ns_ >= 0) { // the bubble this rank just sat in, for traces
    span idle;
    idle.actor = trace_id, idle.kind = span_kind::idle, idle.step = static_cast<std::int32_t>(t->step);
    idle.begin_ns = idle_since_ns_, idle.end_ns = trace_now();
    trace_recorder::global().record(idle);
    idle_since_ns_ = -1;
  }
  bool weight_pass = begin_weight_pass(*t);
  if (attention_ && !t->parts.empty())
    throw std::runtime_error(fmt::format("{}: policy {} fuses forwards with backwards (F&B), which attention "
                                         "servers do not run in pieces; choose another policy",
                                         cfg_.name, cfg_.policy));
  if (attention_) {
    pieces_task_ = *t, pieces_weight_pass_ = weight_pass;
    if (weight_pass)
      end_weight_pass(); // the pieces arm the buckets themselves
    start_pieces(*t);
    if (!attention_->busy())
      finish_pieces();
    return true;
  }
  compute(*t);
  if (weight_pass)
    end_weight_pass();
  core_->finish(*t);
  return true;
}

void stage_engine::compute(const sched::stage_task& t) {
  const auto& a = t.what;
  scoped_span s(trace_id, span_of(a.kind), static_cast<std::int32_t>(t.step), a.microbatch);
  activity_board::global().run(trace_id, span_of(a.kind), static_cast<std::int32_t>(t.step), a.microbatch, t.chunk);
  auto t0 = trace_now();
  auto cpu0 = thread_cpu_ns();
  std::int64_t device_ns = 0;      // an emulated device's time, asleep
  if (t.step == cfg_.stall_step) { // a stuck device, once
    cfg_.stall_step = -1;
    std::this_thread::sleep_for(std::chrono::duration<double>(cfg_.stall_s));
    device_ns += trace_now() - t0;
  }
  std::uint64_t bytes = 0;
  for (const auto& pass : t.parts.empty() ? std::span(&t, 1) : std::span(t.parts)) { // an F&B: forward, then backward
    auto out = run_pass(pass);
    bytes += out.defined() ? out.value.nbytes() : 0;
    outputs_[pass.what.kind == sched::op_kind::forward ? 0 : 1] = std::move(out); // the core sends them on
  }
  if (cfg_.slowdown > 1.0) { // an emulated slow device: the rest of the action's time, asleep
    auto d = static_cast<std::int64_t>(static_cast<double>(trace_now() - t0 - device_ns) * (cfg_.slowdown - 1.0));
    std::this_thread::sleep_for(std::chrono::nanoseconds(d));
    device_ns += d;
  }
  compute_ns_ += trace_now() - t0;
  // The step time compared across replicas: this thread's CPU time plus the
  // emulated device's, which other threads of a busy machine do not inflate
  // (wall time did, 3-5x at a load of 10 on 2 cores, more than a 3x straggler).
  step_busy_ns_[t.step] += thread_cpu_ns() - cpu0 + device_ns;
  s.get().bytes = bytes;
}

} // namespace troupe
