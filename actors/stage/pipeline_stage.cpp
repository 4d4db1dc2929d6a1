// The pipeline_stage actor: owns a stage_engine and turns messages into its
// calls; after every message it lets the engine's policy pick one action.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "actors/builtin.hpp"
#include "actors/skippipe_plan.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/actor/outer_messages.hpp"
#include "actors/stage/pipeline_messages.hpp"
#include "actors/data/tokenizer.hpp"
#include "actors/stage/stage_engine.hpp"
#include "schedulers/policies/rule_policies.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/trace/hang_watch.hpp"
#include "runtime/trace/trace.hpp"
#include "ops/model_config.hpp"

namespace troupe {

namespace {

/// Where this stage's checkpoints go and what it resumes from.
struct stage_checkpointing {
  std::filesystem::path dir;                   ///< checkpoint.dir; empty = none
  std::map<std::string, std::string> identity; ///< checkpoint_identity of this stage
  std::filesystem::path resume_folder;         ///< empty = a fresh start
  step_t resume_step = 0;
  std::filesystem::path init_part; ///< a warm start's weights (train.init); empty = none
  /// Reads them: the checkpoint's part, or this stage's tensors of a weights file.
  std::function<caf::expected<safetensors_file>()> read_init;
  /// A lost replica's stage in a process that replaces its node (#26): it
  /// starts from the state a live replica's stage sends it, taking no other
  /// message before (they wait in the mailbox).
  bool joining = false;
};

struct pipeline_stage_state {
  std::unique_ptr<stage_engine> engine;
  caf::actor runner;
  std::vector<caf::actor> actors;       ///< every actor of the graph, by index (routes name them so)
  std::vector<std::uint16_t> actor_ids; ///< their trace ids, for counted mailbox depth
  bool kick_pending = false;
  bool wake_pending = false;
  bool done_sent = false;
  bool failed = false;
  std::int64_t handler_ns = 0;
  std::int64_t started_ns = 0;
  std::int64_t last_print_ns = 0;
  std::size_t reports_printed = 0;
  std::size_t vals_printed = 0;
  std::int64_t tokens_per_step = 0;
  step_t first_step = 0;       ///< the step this run started at (after a resume)
  std::int64_t bytes_sent = 0; ///< activation and gradient bytes sent to other stages
  static inline const char* name = "pipeline_stage";
};

using stage_actor = caf::stateful_actor<pipeline_stage_state>;

std::string eta(double seconds) {
  auto s = static_cast<long>(seconds + 0.5);
  return s >= 60 ? fmt::format("{}m{:02}s", s / 60, s % 60) : fmt::format("{}s", s);
}

/// Progress lines from the stage that computes the loss: at most one a second,
/// plus the first step, every validation pass and the last step.
void print_progress(stage_actor* self) {
  auto& st = self->state;
  auto& e = *st.engine;
  const auto& reps = e.reports();
  const auto& vals = e.val_losses();
  const auto& shorter = e.short_val_losses();
  auto now = trace_now();
  while (st.vals_printed < vals.size()) {
    auto [step, loss] = vals[st.vals_printed];
    fmt::print("{}: validation after step {}: loss {:.4f} ({:.3f} bits/{})", e.config().name, step + 1, loss,
               loss / std::log(2.0), e.config().byte_tokens ? "byte" : "token");
    if (st.vals_printed < shorter.size()) // SkipPipe: the model with fewer layers beside the full one
      fmt::print("; on a path of {} stages: loss {:.4f} (perplexity {:.3f} against {:.3f})",
                 e.config().short_eval_stages, shorter[st.vals_printed].second,
                 std::exp(shorter[st.vals_printed].second), std::exp(loss));
    fmt::print("\n");
    ++st.vals_printed;
  }
  if (reps.size() == st.reports_printed)
    return;
  st.reports_printed = reps.size();
  const auto& r = reps.back();
  auto total = e.config().steps;
  bool due = r.step == st.first_step || r.step + 1 == total || now - st.last_print_ns > 1'000'000'000;
  if (!due)
    return;
  st.last_print_ns = now;
  double elapsed = static_cast<double>(now - st.started_ns) / 1e9;
  double per_step = elapsed / static_cast<double>(r.step + 1 - st.first_step);
  fmt::print("step {:>5}/{} | loss {:.4f} | lr {:.2e} | {:>7.0f} tok/s | {:6.1f} ms/step | eta {}\n", r.step + 1, total,
             r.loss, r.lr, static_cast<double>(st.tokens_per_step) / per_step, per_step * 1e3,
             eta(per_step * static_cast<double>(total - r.step - 1)));
  std::fflush(stdout);
}

void fail(stage_actor* self, const std::string& what) {
  auto& st = self->state;
  if (st.failed)
    return;
  st.failed = true;
  self->send(st.runner, failed_atom::value,
             failure_msg{st.engine ? st.engine->config().name : "stage", what, st.engine ? st.engine->step() : -1});
}

void maybe_done(stage_actor* self) {
  auto& st = self->state;
  auto& e = *st.engine;
  if (st.done_sent || !e.training_done())
    return;
  bool loss_stage = e.owns_loss() && e.config().replica == 0; // replica 0 evaluates and reports
  if (loss_stage && (e.val_losses().empty() || e.val_losses().back().first + 1 < e.config().steps))
    return; // the final validation pass is still on its way
  st.done_sent = true;
  run_summary s;
  s.actor = e.config().name;
  s.steps = e.step() - st.first_step;
  auto held = e.held();
  record_held(s.actor,
              held); // the trace's latest, as the summary says (ZeRO-2 gave its gradients back since the start)
  s.params_bytes = held.params, s.grads_bytes = held.grads, s.optimizer_bytes = held.optimizer;
  s.bytes_sent = st.bytes_sent;
  s.position = e.config().rank;
  for (auto [step, ns] : e.step_busy_ns())
    if (step >= st.first_step) {
      s.step_busy_ns.resize(static_cast<std::size_t>(step - st.first_step + 1), 0);
      s.step_busy_ns.back() = ns;
    }
  if (loss_stage) {
    s.tokens = st.tokens_per_step * s.steps;
    if (!e.reports().empty())
      s.train_loss = e.reports().back().loss;
    s.val_loss = e.val_losses().back().second;
    if (!e.short_val_losses().empty())
      s.val_loss_short = e.short_val_losses().back().second;
    for (const auto& r : e.reports())
      s.losses.push_back(r.loss);
  }
  s.rollbacks = e.rollbacks();
  if (loss_stage && e.config().post_validate)
    fmt::print("{}: post-validation rolled back and redid {} of {} steps (the clip bound)\n", s.actor, s.rollbacks,
               s.steps);
  if (const auto* a = e.attention(); a && e.config().replica == 0 && !a->pairs_before().empty()) {
    // The balance the planner gave this position's rounds (every replica plans the same).
    auto ratio = [](const std::vector<std::int64_t>& v) {
      double sum = 0, mx = 0;
      for (auto x : v)
        sum += static_cast<double>(x), mx = std::max(mx, static_cast<double>(x));
      return sum > 0 ? mx * static_cast<double>(v.size()) / sum : 1.0;
    };
    fmt::print("{}: attention pairs per server, max/avg {:.3f} at home, {:.3f} as planned ({} before, {} after)\n",
               s.actor, ratio(a->pairs_before()), ratio(a->pairs_after()), fmt::join(a->pairs_before(), "/"),
               fmt::join(a->pairs_after(), "/"));
  }
  double wall = static_cast<double>(trace_now() - st.started_ns);
  fmt::print("{}: busy {:.1f}% of the run; runtime overhead {:.2f}% (actor time outside compute)\n", s.actor,
             100.0 * static_cast<double>(e.compute_ns()) / wall,
             100.0 * static_cast<double>(st.handler_ns - e.compute_ns()) / wall);
  std::fflush(stdout);
  self->send(st.runner, done_atom::value, std::move(s));
}

/// Runs `f` as one message's work (`what` names the message, a string literal,
/// for the hang detector): timed, errors turned into a failure report. `f` returns true when the engine may now have ready work; then one
/// `continue` is queued, behind whatever else already waits in the mailbox, so
/// the policy decides with everything that has arrived.
template <class F>
void handle(stage_actor* self, const char* what, F&& f) {
  auto& st = self->state;
  if (st.failed)
    return;
  auto t0 = trace_now();
  handler_scope busy(st.engine ? st.engine->trace_id : std::uint16_t{0xffff}, what);
  try {
    if (f(*st.engine) && !st.kick_pending && !st.engine->training_done()) {
      st.kick_pending = true;
      self->send(self, continue_atom::value);
    }
    print_progress(self);
  } catch (const std::exception& e) {
    fail(self, e.what());
  }
  st.handler_ns += trace_now() - t0;
  if (!st.failed)
    maybe_done(self); // after the accounting, so the final report includes this message's work
}

/// A zero-length send or receive span carrying the message's flow id. A receive
/// carries the mailbox depth as counted by trace_recorder (CAF 0.17's
/// mailbox().size() trips UBSan: a downcast of its queue sentinel).
void record_send(std::uint16_t actor, step_t step, int stage, int mb, int kind, std::size_t bytes, bool end) {
  span s;
  if (end)
    s.mailbox = trace_recorder::global().message_received(actor);
  s.actor = actor, s.kind = end ? span_kind::receive : span_kind::send;
  s.step = static_cast<std::int32_t>(step), s.microbatch = mb, s.bytes = bytes;
  s.flow = flow_id(step, stage, mb, kind), s.flow_end = end;
  s.begin_ns = s.end_ns = trace_now();
  trace_recorder::global().record(s);
}

/// Writes this stage's part of the checkpoint after `steps` steps and tells the runner.
void write_checkpoint(stage_actor* self, const stage_checkpointing& ck, step_t steps) {
  auto& e = *self->state.engine;
  auto md = ck.identity;
  md.merge(e.checkpoint_metadata());
  auto file = write_checkpoint_part(ck.dir, steps, e.config().name, e.checkpoint_tensors(), std::move(md));
  if (!file)
    throw std::runtime_error(fmt::format("checkpoint after step {} failed: {}", steps, error_message(file.error())));
  self->send(self->state.runner, checkpoint_atom::value, checkpoint_msg{e.config().name, steps, *file});
}

/// Loads the part of the checkpoint being resumed into the engine.
caf::error restore_checkpoint(stage_actor* self, const stage_checkpointing& ck) {
  auto& e = *self->state.engine;
  auto f = read_checkpoint_part(ck.resume_folder, e.config().name, ck.resume_step);
  if (!f)
    return f.error();
  auto file = (ck.resume_folder / checkpoint_part_name(e.config().name)).string();
  if (auto err = e.restore(*f, ck.resume_step, file))
    return err;
  self->state.first_step = ck.resume_step;
  return {};
}

caf::behavior pipeline_stage(stage_actor* self, stage_config cfg, caf::actor runner, std::int64_t tokens,
                             stage_checkpointing ck, std::uint16_t id) {
  auto& st = self->state;
  st.runner = std::move(runner);
  st.tokens_per_step = tokens;
  stage_outbox out;
  // Every message goes to an actor named by index; a broken route is a failure, not a crash.
  auto to = [self](int actor) -> const caf::actor& {
    auto& all = self->state.actors;
    if (actor < 0 || static_cast<std::size_t>(actor) >= all.size() || !all[static_cast<std::size_t>(actor)])
      throw std::runtime_error(fmt::format("no actor {} in the graph to send to", actor));
    trace_recorder::global().message_sent(self->state.actor_ids[static_cast<std::size_t>(actor)]);
    return all[static_cast<std::size_t>(actor)];
  };
  out.send = [self, id, to](int actor, caf::message m) {
    auto& st = self->state;
    if (m.match_elements<forward_atom, activation_msg>()) { // training traffic: bytes and flows for the trace
      const auto& a = m.get_as<activation_msg>(1);
      st.bytes_sent += static_cast<std::int64_t>(a.activation.nbytes());
      record_send(id, a.step, a.hop, a.microbatch, 0, a.activation.nbytes(), false);
    } else if (m.match_elements<backward_atom, gradient_msg>()) {
      const auto& g = m.get_as<gradient_msg>(1);
      st.bytes_sent += static_cast<std::int64_t>(g.gradient.nbytes());
      record_send(id, g.step, g.hop, g.microbatch, 1, g.gradient.nbytes(), false);
    } else if (m.match_elements<attention_atom, attention_task_msg>()) {
      const auto& t = m.get_as<attention_task_msg>(1);
      for (const auto* x : {&t.q, &t.k, &t.v, &t.dout})
        st.bytes_sent += x->defined() ? static_cast<std::int64_t>(x->nbytes()) : 0;
    } else if (m.match_elements<tied_atom, tied_grad_msg>()) { // the tied matrix's gradient to the twin stage
      st.bytes_sent += static_cast<std::int64_t>(m.get_as<tied_grad_msg>(1).grad.nbytes());
    } else if (m.match_elements<tied_atom, tied_value_msg>()) { // the tied matrix after an outer step, to the head
      const auto& v = m.get_as<tied_value_msg>(1);
      for (const auto* x : {&v.params, &v.exp_avg, &v.exp_avg_sq})
        st.bytes_sent += x->defined() ? static_cast<std::int64_t>(x->nbytes()) : 0;
    } else if (m.match_elements<attention_atom, attention_result_msg>()) { // an in-place server's answer
      const auto& r = m.get_as<attention_result_msg>(1);
      for (const auto* x : {&r.out, &r.dq, &r.dk, &r.dv})
        st.bytes_sent += x->defined() ? static_cast<std::int64_t>(x->nbytes()) : 0;
    }
    self->send(to(actor), std::move(m));
  };
  if (!ck.dir.empty())
    out.checkpoint = [self, ck](step_t steps) { write_checkpoint(self, ck, steps); };
  try {
    st.engine = std::make_unique<stage_engine>(std::move(cfg), std::move(out));
    st.engine->trace_id = id;
  } catch (const std::exception& e) {
    fail(self, e.what());
  }
  // Every other message goes to the engine as it is (plans, evaluation, credits,
  // the norm reduction, attention, and the step-boundary components' traffic).
  auto to_engine = [id](caf::scheduled_actor* ptr, caf::message_view& x) -> caf::result<caf::message> {
    trace_recorder::global().message_received(id);
    auto m = x.move_content_to_message();
    handle(static_cast<stage_actor*>(ptr), "step-boundary or control",
           [&](stage_engine& e) { return e.on_message(m), true; });
    return caf::message{};
  };
  auto connect = [=](connect_atom, const connect_msg& m) -> caf::result<caf::ok_atom> {
    for (const auto& p : m.directory) {
      self->state.actors.push_back(p.handle);
      self->state.actor_ids.push_back(trace_recorder::global().actor_id(p.name).value_or(0xffff));
    }
    if (ck.joining)
      return caf::ok_atom::value; // its state comes from a live replica
    if (!ck.resume_folder.empty() && self->state.engine) {
      if (auto err = restore_checkpoint(self, ck))
        return err;
    } else if (!ck.init_part.empty() && self->state.engine) {
      auto f = ck.read_init();
      if (!f)
        return f.error();
      if (auto err = self->state.engine->load_weights(*f, ck.init_part.string()))
        return err;
    }
    return caf::ok_atom::value;
  };
  caf::behavior running{
    connect,
    [=](start_atom) {
      self->state.started_ns = trace_now();
      if (self->state.engine)
        record_held(self->state.engine->config().name, self->state.engine->held());
      handle(self, "start", [](stage_engine& e) { return e.start(), true; });
    },
    [=](forward_atom, const batch_msg& m) {
      span r; // the loader records no flows: a plain receive span with the counted depth
      r.actor = id, r.kind = span_kind::receive, r.step = static_cast<std::int32_t>(m.step),
      r.microbatch = m.microbatch;
      r.bytes = m.tokens.nbytes() + m.targets.nbytes();
      r.mailbox = trace_recorder::global().message_received(id);
      r.begin_ns = r.end_ns = trace_now();
      trace_recorder::global().record(r);
      handle(self, "batch", [&](stage_engine& e) { return e.on_batch(m, false), true; });
    },
    [=](forward_atom, const activation_msg& m) {
      record_send(id, m.step, m.hop, m.microbatch, 0, m.activation.nbytes(), true);
      handle(self, "activation", [&](stage_engine& e) { return e.on_activation(m, false), true; });
    },
    [=](backward_atom, const gradient_msg& m) {
      record_send(id, m.step, m.hop, m.microbatch, 1, m.gradient.nbytes(), true);
      handle(self, "gradient", [&](stage_engine& e) { return e.on_gradient(m), true; });
    },
    [=](continue_atom) {
      self->state.kick_pending = false;
      handle(self, "continue", [self](stage_engine& e) {
        if (e.run_one())
          return true;
        if (auto w = e.wake_in(); w && !self->state.wake_pending) {
          // The policy's patience: ask again later even if nothing arrives.
          self->state.wake_pending = true;
          self->delayed_send(self, std::chrono::nanoseconds(static_cast<std::int64_t>(*w * 1e9) + 1000),
                             wake_atom::value);
        }
        return false;
      });
    },
    [=](wake_atom) {
      self->state.wake_pending = false;
      handle(self, "wake", [](stage_engine&) { return true; });
    },
  };
  if (!ck.joining) {
    self->set_default_handler(to_engine);
    return running;
  }
  self->set_default_handler(caf::skip); // everything waits for the state
  return {
    connect,
    [=](state_atom, const state_msg& m) {
      auto& st = self->state;
      if (!st.engine || st.failed)
        return;
      auto from = fmt::format("replica {}'s state after step {}", m.replica, m.steps);
      try {
        if (auto err = st.engine->restore(state_file(m), m.steps, from)) {
          fail(self, error_message(err));
          return;
        }
      } catch (const std::exception& e) {
        fail(self, fmt::format("{}: {}", from, e.what()));
        return;
      }
      st.first_step = m.steps;
      self->set_default_handler(to_engine);
      self->become(running); // the messages that waited are taken now, in order
    },
  };
}

} // namespace

/// The stage's settings from the graph: its layer ranges, rank and the run's schedule.
stage_config make_stage_config(const actor_spec& spec, const graph_spec& g) {
  stage_config c;
  c.name = spec.name;
  c.rank = spec.rank;
  c.ranks = 0;
  for (const auto& a : g.actors)
    c.ranks += a.role.holds_layers && a.replica == spec.replica; // positions of its own replica
  c.replica = spec.replica;
  c.replicas = std::max(g.data_parallel.replicas, 1);
  c.boundaries = select_step_boundaries(g, spec);
  auto index_of = [&](const std::string& name) {
    for (std::size_t i = 0; i < g.actors.size(); ++i)
      if (g.actors[i].name == name)
        return static_cast<int>(i);
    return -1;
  };
  c.actor = index_of(spec.name);
  for (std::size_t i = 0; i < g.actors.size(); ++i)
    if (g.actors[i].type == "data_loader")
      c.router = static_cast<int>(i);
  c.chunks = static_cast<int>(spec.layers.size());
  c.model.layers = g.model.layers;
  c.model.head_apart = g.skip_runs(); // SkipPipe: stage 0 holds the head as [layers, layers) (#14)
  for (const auto& r : spec.layers)
    c.loss |= ops::holds_head(c.model, r.begin, r.end);
  // Credits for every actor that sends here: the channel's, else the policy's
  // default (0); targets from the router get more, being small and needed a
  // pipeline's depth ahead.
  bool first = false;
  for (const auto& r : spec.layers)
    first |= r.begin == 0;
  auto is_peer = [&](int actor) { // the step-boundary peers' answers take no buffers
    return std::any_of(c.boundaries.begin(), c.boundaries.end(), [&](const auto& b) { return b.peer == actor; });
  };
  for (const auto& ch : g.channels)
    if (ch.to == spec.name && !is_peer(index_of(ch.from))) {
      int from = index_of(ch.from);
      bool targets_only = from == c.router && c.loss && !first;
      c.input_credits[from] = ch.credits > 0 ? ch.credits : targets_only ? sched::default_target_credits(c.ranks) : 0;
    }
  if (g.data_parallel.route == "least_loaded" && g.data_parallel.replicas > 1) {
    // Routing around stragglers: any replica of the previous position may send
    // here, and this stage sends to any replica of the next one.
    for (std::size_t i = 0; i < g.actors.size(); ++i) {
      const auto& a = g.actors[i];
      if (!a.role.holds_layers)
        continue;
      // Interleaved chunks wrap from the last position to the first.
      bool wraps = c.chunks > 1 && spec.rank == 0 && a.rank == g.pipeline.stages - 1;
      if (a.rank == spec.rank - 1 || wraps)
        c.input_credits.emplace(static_cast<int>(i), 0);
      if (a.rank == spec.rank + 1)
        c.next_replicas.push_back(static_cast<int>(i));
    }
    c.hop_reporters = first ? 0 : g.data_parallel.replicas;
    c.targets_travel = true;
    if (g.elastic_least_loaded()) // a lost replica's stages leave every stage's routes (stage_engine::on_replica_lost)
      for (std::size_t i = 0; i < g.actors.size(); ++i)
        if (g.actors[i].role.holds_layers)
          c.stage_replicas[static_cast<int>(i)] = g.actors[i].replica;
  }
  if (auto s = spec.params.find("slowdown"); s != spec.params.end() && s->second.IsScalar())
    c.slowdown = s->second.as<double>();
  if (auto s = spec.params.find("stall"); s != spec.params.end()) // checked by check_pipeline_stage
    if (auto stall = parse_stall(s->second))
      c.stall_step = stall->first, c.stall_s = stall->second;
  c.steps = g.train.steps;
  c.eval_every = g.train.eval_every;
  c.eval_batches = g.train.eval_batches;
  if (g.skip_runs() && skippipe_path_stages(g) < g.pipeline.stages)
    c.eval_routes = 2, c.short_eval_stages = g.skip.path_length;       // the full model, then a path of L stages
  c.byte_tokens = g.data.source != "tokens" && !uses_sentencepiece(g); // token files and SentencePiece: ids
  c.grad_clip = g.train.grad_clip;
  c.post_validate = g.train.clip == "post_validate";
  c.weight_decay = static_cast<float>(g.train.weight_decay);
  c.model = ops::model_config(g);
  c.lr.max_lr = static_cast<float>(g.train.lr);
  c.lr.min_lr = static_cast<float>(g.train.lr * 0.1);
  c.lr.warmup = static_cast<long>(g.train.warmup);
  c.lr.total = static_cast<long>(g.train.steps);
  for (const auto& r : spec.layers)
    c.layers.emplace_back(r.begin, r.end);
  c.policy = g.pipeline.schedule;
  c.policy_params.table_file = g.pipeline.table_path.string();
  c.policy_params.options = g.pipeline.policy;
  c.policy_params.paths = g.skip_runs(); // SkipPipe's paths: hops left differ per microbatch (#25)
  if (auto own = spec.params.find("policy"); own != spec.params.end() && own->second.IsMap())
    for (auto it = own->second.begin(); it != own->second.end(); ++it) // a stage's own options win
      if (it->first.IsScalar() && it->second.IsScalar())
        c.policy_params.options[it->first.Scalar()] = it->second.Scalar();
  c.policy_params.routed = g.routes_across_replicas();
  if (c.policy_params.routed && c.chunks > 1 && c.policy == "interleaved_1f1b") {
    // Each message from a stage that waits here unstarted is one the sender
    // holds in flight: grant every stage sender the largest bound (rank 0's),
    // so a later chunk never waits for a credit (rule_policies.cpp, next_routed).
    auto p0 = c.policy_params;
    p0.rank = 0, p0.ranks = g.pipeline.stages, p0.chunks = c.chunks;
    if (auto b = sched::interleaved_bound(p0))
      for (auto& [from, n] : c.input_credits)
        if (from != c.router && n == 0)
          n = std::max(*b, 2);
  }
  c.wire_bf16 = g.pipeline.wire == "bf16";
  if (g.attention.present) { // core attention on attention servers (#15)
    auto& at = c.attention;
    at.replicas = std::max(g.data_parallel.replicas, 1), at.replica = spec.replica;
    at.nano_batches = g.attention.nano_batches, at.tolerance = g.attention.tolerance;
    if (g.attention.servers == 0) { // in place: the stages of its position serve each other, by replica
      at.servers.assign(static_cast<std::size_t>(at.replicas), -1);
      for (std::size_t i = 0; i < g.actors.size(); ++i)
        if (const auto& a = g.actors[i];
            a.role.holds_layers && a.rank == spec.rank && a.replica >= 0 && a.replica < at.replicas)
          at.servers[static_cast<std::size_t>(a.replica)] = static_cast<int>(i);
      at.self_server = spec.replica;
    } else {
      for (std::size_t i = 0; i < g.actors.size(); ++i)
        if (g.actors[i].type == "attention_server")
          at.servers.push_back(static_cast<int>(i));
    }
  }
  c.checkpoint_every = g.checkpoint.dir_path.empty() ? 0 : g.checkpoint.every;
  c.max_batch = g.data.batch *
                (spec.replica == 0 ? std::max(g.data_parallel.replicas, 1) : 1); // replica 0 evaluates the global batch
  return c;
}

actor_type_info pipeline_stage_info() {
  actor_type_info info;
  // policy: schedule options of this stage (runtime/graph/graph_policy.cpp checks them);
  // slowdown: an emulated slow device, each action taking that many times its compute;
  // stall: {step, for}: a device stuck once, at the first action of that (1-based) step.
  info.keys = {"policy", "slowdown", "stall"};
  info.role.holds_layers = true;
  info.role.placement = actor_placement::by_position;
  info.check = check_pipeline_stage;
  info.role.check_checkpoint_part = check_stage_checkpoint;
  info.role.check_init_file = check_stage_init_file;
  info.role.checkpoint_identity = [](const graph_spec& g, const actor_spec& a) {
    const auto& m = g.model;
    std::string layers;
    for (auto r : a.layers)
      layers += fmt::format("{}[{}, {})", layers.empty() ? "" : " ", r.begin, r.end);
    std::map<std::string, std::string> id{{"model.layers", std::to_string(m.layers)},
                                          {"model.d_model", std::to_string(m.d_model)},
                                          {"model.heads", std::to_string(m.heads)},
                                          {"model.context", std::to_string(m.context)},
                                          {"model.vocab", std::to_string(m.vocab)},
                                          {"model.precision", std::string{to_string(m.precision)}},
                                          {"layers", layers}};
    if (m.family != "gpt2") { // gpt2's identity stays as it was, so older checkpoints still match
      const auto c = ops::model_config(g);
      id["model.family"] = m.family;
      id["model.kv_heads"] = std::to_string(ops::kv_heads_of(c));
      id["model.ffn_hidden"] = std::to_string(ops::ffn_hidden_of(c));
      id["model.rope_theta"] = fmt::format("{}", c.rope_theta);
      id["model.tie_embeddings"] = c.tie_embeddings ? "true" : "false";
      id["model.norm_eps"] = fmt::format("{}", c.norm_eps);
    }
    return id;
  };
  return info;
}

caf::expected<caf::actor> spawn_pipeline_stage(spawn_context& ctx) {
  auto cfg = make_stage_config(ctx.spec, ctx.graph);
  // Where it runs is settled here, so a missing GPU stops the run before anything starts.
  caf::expected<int> cuda_devices = 0;
  if (const auto& want = ctx.spec.device.empty() ? ctx.graph.pipeline.device : ctx.spec.device;
      want.starts_with("cuda")) {
    auto backend = stage_model_backend_for(device::kind_t::cuda);
    cuda_devices = backend ? backend->devices() : caf::expected<int>{backend.error()};
  }
  auto dev = stage_device(ctx.spec, ctx.graph, cuda_devices);
  if (!dev)
    return dev.error();
  cfg.device = *dev;
  auto tokens = ctx.graph.tokens_per_step();
  stage_checkpointing ck{ctx.graph.checkpoint.dir_path,
                         checkpoint_identity(ctx.graph, ctx.spec),
                         ctx.graph.checkpoint.resume_folder,
                         ctx.graph.checkpoint.resume_step,
                         {},
                         {}};
  ck.joining = ctx.graph.cluster.joining;
  if (!ck.joining && ck.resume_folder.empty() && !ctx.graph.train.init.empty()) { // a resumed run has its own weights
    auto part = find_init_part(ctx.graph, ctx.spec);
    if (!part)
      return part.error();
    ck.init_part = *part;
    if (init_is_weights_file(ctx.graph))
      ck.read_init = [g = std::make_shared<const graph_spec>(ctx.graph), a = ctx.spec, file = *part] {
        return read_stage_init_file(*g, a, file);
      };
    else
      ck.read_init = [file = *part] { return read_safetensors(file); };
  }
  // Named in the trace here, not when the actor first runs (later, on a worker
  // thread): every actor of the graph is named before any is connected, so each
  // finds the others' trace ids to count their mailboxes.
  auto id = trace_recorder::global().register_actor(cfg.name, "pipeline_stage", 0, std::string{stage_role}, cfg.rank);
  auto self = ctx.system.spawn(pipeline_stage, std::move(cfg), ctx.runner, tokens, std::move(ck), id);
  return caf::actor{self};
}

} // namespace troupe
