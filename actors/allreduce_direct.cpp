// The allreduce_peer's direct form, in a launch that survives a lost DDP
// replica (graph_spec::elastic_ddp, #26): each gradient bucket is summed by a
// reduce-scatter to each chunk's owner and an all-gather from it
// (schedulers/sync/bucket_exchange.hpp) instead of the ring, so the replicas
// left can finish the step a replica was lost in and agree on its sums, and
// take it back from the step the loader names when it rejoins.
#include <cstring>
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
#include "schedulers/sync/ring_allreduce.hpp"

namespace troupe {

namespace {

struct direct_settings {
  std::string name;
  int stage = 0;                 ///< the stage it serves (actor index)
  int replica = 0, replicas = 1; ///< its place among the peers
  std::vector<int> peers;        ///< the peer of every replica at this position, by replica (-1: itself)
  sched::wire_format format = sched::wire_format::f32;
  std::int64_t steps = 0, first_step = 0;
  int buckets = 0; ///< buckets its stage sends a step
};

struct direct_state {
  std::vector<caf::actor> actors;
  std::vector<std::uint16_t> actor_ids;
  caf::actor runner;
  std::unique_ptr<sched::bucket_exchanges> ex;
  std::map<std::pair<step_t, int>, std::pair<bucket_msg, std::int64_t>> buckets; ///< under way: the stage's, since
  std::uint64_t bytes_sent = 0;
  std::map<int, int> losses; ///< replica -> times heard lost (a rejoin decided before the last is stale)
  int last_step_reduced = 0;
  bool done_sent = false;
  std::uint16_t trace_id = 0;
  static inline const char* name = "allreduce_peer";
};

using direct_actor = caf::stateful_actor<direct_state>;

void report_done(direct_actor* self, const direct_settings& cfg) {
  auto& st = self->state;
  if (std::exchange(st.done_sent, true))
    return;
  run_summary s;
  s.actor = cfg.name;
  s.bytes_sent = static_cast<std::int64_t>(st.bytes_sent);
  self->send(st.runner, done_atom::value, std::move(s));
}

/// Sends what the exchanges return, then hands every complete sum to the stage.
void run(direct_actor* self, const direct_settings& cfg, std::vector<sched::bucket_send> sends) {
  auto& st = self->state;
  send_parts(self, cfg.peers, cfg.replica, sends, st.bytes_sent);
  for (auto& done : st.ex->take_done()) {
    auto it = st.buckets.find({done.step, done.bucket});
    if (it == st.buckets.end())
      throw std::logic_error(
        fmt::format("{}: bucket {} of step {} summed, not sent", cfg.name, done.bucket, done.step));
    auto& [m, started] = it->second;
    write_values(m.tensors, done.values.data());
    span s;
    s.actor = st.trace_id, s.kind = span_kind::sync;
    s.step = static_cast<std::int32_t>(done.step), s.microbatch = done.bucket;
    s.bytes = done.values.size() * sizeof(float);
    s.begin_ns = started, s.end_ns = trace_now();
    trace_recorder::global().record(s);
    self->send(st.actors.at(static_cast<std::size_t>(cfg.stage)), reduced_atom::value, done.step,
               std::int32_t{done.bucket});
    st.buckets.erase(it);
    if (done.step + 1 >= cfg.steps && ++st.last_step_reduced >= cfg.buckets)
      report_done(self, cfg);
  }
}

caf::behavior allreduce_direct(direct_actor* self, direct_settings cfg, caf::actor runner) {
  self->state.runner = std::move(runner);
  self->state.trace_id = trace_recorder::global().register_actor(cfg.name, "allreduce_peer");
  self->state.ex = std::make_unique<sched::bucket_exchanges>(cfg.replicas, cfg.replica, cfg.format);
  return {
    [=](connect_atom, const connect_msg& m) -> caf::result<caf::ok_atom> {
      store_directory(m, self->state.actors, self->state.actor_ids);
      return caf::ok_atom::value;
    },
    [=](start_atom) {
      if (cfg.first_step >= cfg.steps || cfg.buckets <= 0)
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
      guarded(self, cfg.name, "bucket part", m.step, [&] {
        if (m.replica < 0 || m.replica >= cfg.replicas || m.replica == cfg.replica)
          throw std::invalid_argument(
            fmt::format("{}: a bucket part from replica {} of {}", cfg.name, m.replica, cfg.replicas));
        run(self, cfg, self->state.ex->receive(m.step, m.fragment, m.replica, m.round, m.piece, part_rows(m)));
      });
    },
    [=](replica_lost_atom, std::int32_t replica) { // its node was lost: the sums go on without it
      guarded(self, cfg.name, "replica lost", -1, [&] {
        ++self->state.losses[replica];
        run(self, cfg, self->state.ex->lose(replica));
      });
    },
    [=](rejoin_atom, const rejoin_msg& m) { // the loader's decision: the lost replica's buckets count again
      guarded(self, cfg.name, "rejoin", m.steps, [&] {
        if (m.losses < self->state.losses[m.replica])
          return; // lost again on its way back, after the loader decided: it stays out
        self->state.ex->rejoin(m.replica, m.steps);
      });
    },
  };
}

} // namespace

caf::expected<caf::actor> spawn_allreduce_direct(spawn_context& ctx) {
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
  cfg.first_step = g.checkpoint.resume_step;
  cfg.buckets = static_cast<int>(
    sched::make_shard_layout(zero_params(g, *stage), g.data_parallel.bucket, cfg.replicas, 0).buckets.size());
  auto peers = position_peers(g, *stage, "allreduce_peer", ctx.spec.name);
  if (!peers)
    return peers.error();
  cfg.peers = std::move(*peers);
  return caf::actor{ctx.system.spawn(allreduce_direct, std::move(cfg), ctx.runner)};
}

} // namespace troupe
