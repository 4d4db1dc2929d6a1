// The optimizer_shard's direct form, in a launch that survives a lost ZeRO-1/2
// replica (graph_spec::elastic_ddp, #26).
//
// Gradients: each bucket is summed by direct exchanges
// (schedulers/sync/bucket_exchange.hpp) as elastic DDP's all-reduce peers sum
// it, so every replica holds the whole summed bucket and the replicas left
// agree on every sum, however a loss falls in a step.
//
// Optimizer state, mirrored: of the R slices of the stage's parameters (one
// per replica, sched::make_shard_layout), the shard of replica r keeps the
// AdamW state of two, r's and (r+1) mod R's, so the holders of slice k are
// replicas k and k−1. Both update it (the same gradients, the same norm: the
// same bits) and both send the updated slice to every other replica that is
// in the step; a replica takes the first copy and checks any second against
// it. A lost replica's slices are still held by their other holder, so nothing
// moves when a replica leaves: the survivors cover every slice from the
// update of the step it was lost in on. Only when both holders of a slice are
// gone is its state lost, and the run stops naming it (restart from a
// checkpoint). The price against the ring form: each shard keeps 2·8Ψ/R of
// moments instead of 8Ψ/R, and receives each slice it does not hold twice.
//
// Rejoin: the replica L that comes back holds slices L and L+1 again; their
// other holders (L−1 and L+1) send it their state after the step the loader
// names, in memory, and from the next step it is in the sums and sends its
// slices like any other replica.
#include <array>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/bucket_direct.hpp"
#include "actors/builtin.hpp"
#include "actors/ring_member.hpp"
#include "actors/zero_shard_state.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/actor/outer_messages.hpp"
#include "runtime/trace/trace.hpp"
#include "schedulers/sync/bucket_exchange.hpp"

namespace troupe {

namespace {

/// The round of an outer_part_msg that carries an updated slice (the exchanges use 0 and 1).
constexpr std::int32_t slice_round = 2;
constexpr step_t never = std::numeric_limits<step_t>::max();

struct direct_settings {
  std::string name;
  int stage = 0;                  ///< the stage it serves (actor index)
  int replica = 0, replicas = 1;  ///< its place among the shards of its position
  std::vector<int> peers;         ///< the shard of every replica at this position (actor index), by replica
  std::vector<std::string> names; ///< and its name
  sched::wire_format format = sched::wire_format::f32;
  std::int64_t steps = 0;
  bool joining = false; ///< a replica that rejoins: its slices' state comes from their other holders
  zero_checkpointing ck;
};

struct direct_state {
  std::vector<caf::actor> actors;
  std::vector<std::uint16_t> actor_ids;
  caf::actor runner;
  std::unique_ptr<sched::bucket_exchanges> ex;
  std::vector<std::unique_ptr<zero_shard>> held;                                 ///< slices r and r+1 (mod R)
  std::vector<sched::shard_layout> layouts;                                      ///< every slice's, by its rank
  std::map<std::pair<step_t, int>, std::pair<bucket_msg, std::int64_t>> buckets; ///< the stage's, since
  /// Slices other holders sent, by (step, slice): who sent the first copy, its values.
  std::map<std::pair<step_t, int>, std::pair<int, std::vector<float>>> slices;
  std::map<int, int> losses;        ///< replica -> times heard lost (a rejoin decided before the last is stale)
  std::map<int, step_t> away;       ///< replica -> the first step it is in again (never: out)
  std::optional<rejoin_msg> donate; ///< a rejoining replica that takes held slices' state
  step_t asked = -1;                ///< the step whose update waits for other holders' slices
  step_t first_step = 0;
  step_t steps_done = 0; ///< its last update's (first_step before any)
  int states_in = 0;     ///< joining: held slices whose state came
  std::uint64_t bytes_sent = 0;
  bool done_sent = false;
  std::uint16_t trace_id = 0;
  static inline const char* name = "optimizer_shard";
};

using direct_actor = caf::stateful_actor<direct_state>;

bool holds(const direct_settings& cfg, int k) {
  auto h = slice_holders(k, cfg.replicas);
  return h[0] == cfg.replica || h[1] == cfg.replica;
}

/// Whether replica `r` takes part in step `step`.
bool in_step(const direct_state& st, int r, step_t step) {
  auto it = st.away.find(r);
  return it == st.away.end() || it->second <= step;
}

held_bytes held_total(const direct_state& st) {
  held_bytes h;
  for (const auto& s : st.held) {
    auto x = s->held();
    h.params += x.params, h.grads += x.grads, h.optimizer += x.optimizer;
  }
  return h;
}

void report_done(direct_actor* self, const direct_settings& cfg) {
  auto& st = self->state;
  if (std::exchange(st.done_sent, true))
    return;
  run_summary s;
  s.actor = cfg.name;
  auto h = held_total(st);
  s.params_bytes = h.params, s.grads_bytes = h.grads, s.optimizer_bytes = h.optimizer;
  s.bytes_sent = static_cast<std::int64_t>(st.bytes_sent);
  self->send(st.runner, done_atom::value, std::move(s));
}

/// Sends the rejoining replica the state of the slices it holds with this one,
/// once this one has done the steps the loader named.
void maybe_donate(direct_actor* self, const direct_settings& cfg, step_t steps_done) {
  auto& st = self->state;
  if (!st.donate || st.donate->steps != steps_done)
    return;
  const int joiner = st.donate->replica;
  for (const auto& s : st.held)
    if (auto h = slice_holders(s->rank(), cfg.replicas); h[0] == joiner || h[1] == joiner) {
      // One sender a slice: the holder that is not the joiner (for R = 2 this replica sends both).
      safetensors_file f;
      f.tensors = s->checkpoint_tensors();
      f.metadata = s->checkpoint_metadata();
      self->send(st.actors.at(static_cast<std::size_t>(cfg.peers.at(static_cast<std::size_t>(joiner)))),
                 state_atom::value, to_state_msg(steps_done, cfg.replica, f));
    }
  st.donate.reset();
}

/// Every slice of step `st.asked` is in the stage: it goes on.
void finish_if_complete(direct_actor* self, const direct_settings& cfg) {
  auto& st = self->state;
  const auto step = st.asked;
  if (step < 0)
    return;
  for (int k = 0; k < cfg.replicas; ++k) {
    if (holds(cfg, k) || st.slices.count({step, k}))
      continue;
    auto h = slice_holders(k, cfg.replicas);
    if (!in_step(st, h[0], step) && !in_step(st, h[1], step))
      throw std::runtime_error(fmt::format(
        "{}: slice {} of {} of the optimizer state is lost: replicas {} and {}, which held it, are both gone; the run "
        "stops (resume it from a checkpoint)",
        cfg.name, k, cfg.replicas, h[0], h[1]));
    return; // a holder still to send it
  }
  std::vector<const std::vector<tensor_handle>*> params;
  for (int b = 0; b < static_cast<int>(st.layouts.front().buckets.size()); ++b)
    params.push_back(&st.buckets.at({step, b}).first.params);
  for (int k = 0; k < cfg.replicas; ++k)
    if (!holds(cfg, k))
      write_slice(st.layouts.at(static_cast<std::size_t>(k)), params, st.slices.at({step, k}).second);
  st.asked = -1;
  st.steps_done = step + 1;
  std::erase_if(st.buckets, [&](const auto& kv) { return kv.first.first <= step; });
  std::erase_if(st.slices, [&](const auto& kv) { return kv.first.first < step; }); // step's: for a late second copy
  self->send(st.actors.at(static_cast<std::size_t>(cfg.stage)), updated_atom::value, step);
  if (cfg.ck.due(step + 1))
    self->send(st.runner, checkpoint_atom::value,
               checkpoint_msg{cfg.name, step + 1, cfg.ck.write(*st.held.front(), step + 1, cfg.name)});
  maybe_donate(self, cfg, step + 1);
  if (step + 1 >= cfg.steps)
    report_done(self, cfg);
}

/// Sends what the exchanges return, then takes every complete sum: the held
/// slices keep their gradients, the stage hears the bucket's Σ g².
void run(direct_actor* self, const direct_settings& cfg, std::vector<sched::bucket_send> sends) {
  auto& st = self->state;
  send_parts(self, cfg.peers, cfg.replica, sends, st.bytes_sent);
  for (auto& done : st.ex->take_done()) {
    auto it = st.buckets.find({done.step, done.bucket});
    if (it == st.buckets.end())
      throw std::logic_error(
        fmt::format("{}: bucket {} of step {} summed, not sent", cfg.name, done.bucket, done.step));
    auto& [m, started] = it->second;
    double sq = 0; // the whole bucket's, summed in order: every replica's stage counts the same
    if (done.bucket == st.held.front()->loss_bucket()) {
      write_values(m.tensors, done.values.data()); // the step's loss over the replicas, for the stage
    } else {
      for (float v : done.values)
        sq += static_cast<double>(v) * static_cast<double>(v);
      for (auto& s : st.held) {
        s->bind_parameters(done.bucket, m.params);
        s->keep_gradients(done.bucket, done.values.data(), m.tensors);
      }
    }
    span s;
    s.actor = st.trace_id, s.kind = span_kind::sync;
    s.step = static_cast<std::int32_t>(done.step), s.microbatch = done.bucket;
    s.bytes = done.values.size() * sizeof(float);
    s.begin_ns = started, s.end_ns = trace_now();
    trace_recorder::global().record(s);
    self->send(st.actors.at(static_cast<std::size_t>(cfg.stage)), reduced_atom::value, done.step,
               std::int32_t{done.bucket}, sq);
  }
}

/// The stage's update: AdamW on the held slices, which go to every replica in the step that does not hold them.
void update(direct_actor* self, const direct_settings& cfg, step_t step, float lr, float clip) {
  auto& st = self->state;
  if (st.asked >= 0)
    throw std::logic_error(
      fmt::format("{}: asked to update step {} while step {} waits for slices", cfg.name, step, st.asked));
  for (auto& s : st.held) {
    s->update(lr, clip);
    auto values = s->slice_values();
    for (int q = 0; q < cfg.replicas; ++q) {
      if (q == cfg.replica || !in_step(st, q, step))
        continue;
      if (auto h = slice_holders(s->rank(), cfg.replicas); h[0] == q || h[1] == q)
        continue;
      std::vector<std::uint8_t> bytes(values.size() * sizeof(float));
      std::memcpy(bytes.data(), values.data(), bytes.size());
      st.bytes_sent += bytes.size();
      self->send(st.actors.at(static_cast<std::size_t>(cfg.peers.at(static_cast<std::size_t>(q)))),
                 outer_part_atom::value,
                 outer_part_msg{step,
                                s->rank(),
                                cfg.replica,
                                slice_round,
                                0,
                                static_cast<std::int32_t>(sched::wire_format::f32),
                                static_cast<std::int64_t>(values.size()),
                                0,
                                std::move(bytes),
                                {}});
    }
  }
  st.asked = step;
  finish_if_complete(self, cfg);
}

/// An updated slice from one of its holders.
void take_slice(direct_actor* self, const direct_settings& cfg, outer_part_msg& m) {
  auto& st = self->state;
  const int k = m.fragment;
  if (k < 0 || k >= cfg.replicas || holds(cfg, k))
    throw std::invalid_argument(fmt::format("{}: slice {} of {} from replica {}, which this shard holds itself",
                                            cfg.name, k, cfg.replicas, m.replica));
  if (auto h = slice_holders(k, cfg.replicas); h[0] != m.replica && h[1] != m.replica)
    throw std::invalid_argument(
      fmt::format("{}: slice {} from replica {}, which does not hold it", cfg.name, k, m.replica));
  // A replica known lost may have updated on sums the survivors replaced: its copy is dropped.
  if (!in_step(st, m.replica, m.step))
    return;
  if (m.step < st.first_step || static_cast<std::int64_t>(m.data.size()) != m.values * 4 ||
      m.values != st.layouts.at(static_cast<std::size_t>(k)).elements())
    throw std::invalid_argument(fmt::format("{}: slice {} of step {} from replica {}: {} values, {} bytes", cfg.name, k,
                                            m.step, m.replica, m.values, m.data.size()));
  std::vector<float> values(static_cast<std::size_t>(m.values));
  std::memcpy(values.data(), m.data.data(), m.data.size());
  auto [it, first] = st.slices.try_emplace({m.step, k}, m.replica, std::move(values));
  if (!first) { // the other holder's copy: the same bits, or the holders disagree
    if (std::memcmp(it->second.second.data(), m.data.data(), m.data.size()) != 0)
      throw std::logic_error(fmt::format("{}: slice {} of step {} differs between replicas {} and {}, which both "
                                         "hold it",
                                         cfg.name, k, m.step, it->second.first, m.replica));
    return;
  }
  if (m.step == st.asked)
    finish_if_complete(self, cfg);
}

/// Joining: a held slice's state from its other holder.
bool take_state(direct_actor* self, const direct_settings& cfg, const state_msg& m) {
  auto& st = self->state;
  auto f = state_file(m);
  auto slice = f.metadata.find("zero.slice");
  auto from = fmt::format("replica {}'s optimizer slice after step {}", m.replica, m.steps);
  zero_shard* s = nullptr;
  for (auto& h : st.held)
    if (slice != f.metadata.end() && slice->second == fmt::format("{} of {}", h->rank(), cfg.replicas))
      s = h.get();
  if (!s)
    throw std::invalid_argument(fmt::format("{}: {} is slice '{}', which this shard does not hold", cfg.name, from,
                                            slice == f.metadata.end() ? "?" : slice->second));
  if (st.states_in > 0 && m.steps != st.first_step)
    throw std::invalid_argument(
      fmt::format("{}: {} after the other slice's after step {}", cfg.name, from, st.first_step));
  if (auto err = s->restore(f, from))
    throw std::runtime_error(error_message(err));
  st.first_step = st.steps_done = m.steps;
  return ++st.states_in == static_cast<int>(st.held.size());
}

caf::behavior optimizer_shard_direct(direct_actor* self, direct_settings cfg,
                                     std::vector<std::unique_ptr<zero_shard>> held,
                                     std::vector<sched::shard_layout> layouts, caf::actor runner) {
  auto& st0 = self->state;
  st0.held = std::move(held);
  st0.layouts = std::move(layouts);
  st0.runner = std::move(runner);
  st0.trace_id = trace_recorder::global().register_actor(cfg.name, "optimizer_shard");
  st0.ex = std::make_unique<sched::bucket_exchanges>(cfg.replicas, cfg.replica, cfg.format);
  st0.first_step = st0.steps_done = cfg.ck.resume_step;
  auto connect = [=](connect_atom, const connect_msg& m) -> caf::result<caf::ok_atom> {
    store_directory(m, self->state.actors, self->state.actor_ids);
    if (cfg.joining)
      return caf::ok_atom::value;
    // Its own slice from its own part, the one it mirrors from the next shard's.
    for (auto& s : self->state.held)
      if (auto err = cfg.ck.restore(*s, cfg.names.at(static_cast<std::size_t>(s->rank()))))
        return err;
    return caf::ok_atom::value;
  };
  caf::behavior running{
    connect,
    [=](start_atom) {
      record_held(cfg.name, held_total(self->state));
      if (self->state.first_step >= cfg.steps)
        report_done(self, cfg);
    },
    [=](bucket_atom, bucket_msg& m) {
      guarded(self, cfg.name, "bucket", m.step, [&] {
        auto flat = flat_values(m.tensors);
        auto step = m.step;
        int bucket = static_cast<int>(m.bucket);
        self->state.buckets[{step, bucket}] = {std::move(m), trace_now()};
        run(self, cfg, self->state.ex->start(step, bucket, flat));
      });
    },
    [=](outer_part_atom, outer_part_msg& m) {
      trace_recorder::global().message_received(self->state.trace_id);
      guarded(self, cfg.name, m.round == slice_round ? "slice" : "bucket part", m.step, [&] {
        if (m.replica < 0 || m.replica >= cfg.replicas || m.replica == cfg.replica)
          throw std::invalid_argument(
            fmt::format("{}: a part from replica {} of {}", cfg.name, m.replica, cfg.replicas));
        if (m.round == slice_round) {
          take_slice(self, cfg, m);
          return;
        }
        run(self, cfg, self->state.ex->receive(m.step, m.fragment, m.replica, m.round, m.piece, part_rows(m)));
      });
    },
    [=](shard_step_atom, step_t step, float lr, float clip) {
      guarded(self, cfg.name, "shard step", step, [&] {
        scoped_span s(self->state.trace_id, span_kind::optimizer, static_cast<std::int32_t>(step));
        update(self, cfg, step, lr, clip);
      });
    },
    [=](replica_lost_atom, std::int32_t replica) { // its node was lost: the sums and the slices go on without it
      guarded(self, cfg.name, "replica lost", -1, [&] {
        auto& st = self->state;
        ++st.losses[replica];
        st.away[replica] = never;
        if (st.donate && st.donate->replica == replica)
          st.donate.reset();
        run(self, cfg, st.ex->lose(replica));
        finish_if_complete(self, cfg); // its slices come from their other holders, or the run stops
      });
    },
    [=](rejoin_atom, const rejoin_msg& m) { // the loader's decision: the lost replica is in again from m.steps
      guarded(self, cfg.name, "rejoin", m.steps, [&] {
        auto& st = self->state;
        if (m.losses < st.losses[m.replica])
          return; // lost again on its way back, after the loader decided: it stays out
        st.ex->rejoin(m.replica, m.steps);
        st.away[m.replica] = m.steps;
        bool sends = false;
        for (const auto& s : st.held)
          if (auto h = slice_holders(s->rank(), cfg.replicas); h[0] == m.replica || h[1] == m.replica)
            sends = true;
        if (!sends)
          return;
        if (m.steps < st.steps_done)
          throw std::runtime_error(fmt::format("{}: replica {} is to rejoin with the state of the slices it holds with "
                                               "this shard after step {}, but this one has done {} steps already",
                                               cfg.name, m.replica, m.steps, st.steps_done));
        st.donate = m;
        maybe_donate(self, cfg, st.steps_done); // at that step already: its state now
      });
    },
  };
  if (!cfg.joining)
    return running;
  self->set_default_handler(caf::skip); // everything waits for the held slices' state
  return {
    connect,
    [=](state_atom, const state_msg& m) {
      guarded(self, cfg.name, "state", m.steps, [&] {
        if (take_state(self, cfg, m)) {
          self->set_default_handler(caf::print_and_drop);
          self->become(running); // the messages that waited are taken now, in order
        }
      });
    },
  };
}

} // namespace

caf::expected<caf::actor> spawn_optimizer_shard_direct(spawn_context& ctx) {
  const auto& g = ctx.graph;
  const auto* stage = g.served_stage(ctx.spec);
  if (!stage)
    return make_error(errc::invalid_argument, fmt::format("{}: needs a `stage:` it serves", ctx.spec.name));
  direct_settings cfg;
  cfg.name = ctx.spec.name;
  cfg.stage = g.index_of(stage->name);
  cfg.replica = stage->replica;
  cfg.replicas = g.sync_group_size();
  cfg.format = g.data_parallel.wire == "bf16" ? sched::wire_format::bf16 : sched::wire_format::f32;
  cfg.steps = g.train.steps;
  cfg.joining = g.cluster.joining;
  cfg.ck = zero_checkpointing{part_checkpointing::of(g, ctx.spec)};
  auto peers = position_peers(g, *stage, "optimizer_shard", ctx.spec.name);
  if (!peers)
    return peers.error();
  cfg.peers = std::move(*peers);
  for (int peer : cfg.peers)
    cfg.names.push_back(g.actors.at(static_cast<std::size_t>(peer)).name);
  // Slices r and r+1 held, every slice's layout known (built here: the spawn
  // function may run after this context is gone).
  std::vector<std::unique_ptr<zero_shard>> held;
  int stage_index = g.index_of(stage->name);
  for (int k : {cfg.replica, (cfg.replica + 1) % cfg.replicas})
    held.push_back(std::make_unique<zero_shard>(g, *stage, k, stage_index));
  std::vector<sched::shard_layout> layouts;
  for (int k = 0; k < cfg.replicas; ++k)
    layouts.push_back(stage_shard_layout(g, *stage, cfg.replicas, k));
  return caf::actor{
    ctx.system.spawn(optimizer_shard_direct, std::move(cfg), std::move(held), std::move(layouts), ctx.runner)};
}

} // namespace troupe
