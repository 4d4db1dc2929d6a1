// The allreduce_peer actor: serves one stage of one replica in the ring of its
// pipeline position, summing each gradient bucket over the replicas (ring
// reduce-scatter then all-gather, schedulers/sync/ring_allreduce.hpp) as soon as the
// stage hands it over, while the stage's backward goes on.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "actors/ring_member.hpp"
#include "actors/zero_shard_state.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/trace/trace.hpp"
#include "schedulers/sync/ring_allreduce.hpp"

namespace troupe {

namespace {

struct peer_settings : ring_settings {
  std::int64_t steps = 0;      ///< train.steps: it reports done once the last one's buckets are reduced
  std::int64_t first_step = 0; ///< a resumed run's first step
  int buckets = 0;             ///< buckets its stage sends a step (grad_buckets' layout)
};

struct allreduce_peer_state {
  std::vector<caf::actor> actors; ///< every actor of the graph, by index
  std::vector<std::uint16_t> actor_ids;
  caf::actor runner;
  std::unique_ptr<ring_book> ring;         ///< which chunk goes and comes when
  std::map<ring_key, ring_flight> flights; ///< (step, bucket) -> its values
  std::uint64_t bytes_sent = 0;
  int last_step_reduced = 0; ///< buckets of the run's last step done
  bool done_sent = false;
  std::uint16_t trace_id = 0;
  static inline const char* name = "allreduce_peer";
};

using peer_actor = caf::stateful_actor<allreduce_peer_state>;
using flight_it = std::map<ring_key, ring_flight>::iterator;

/// Its summary, with the tensor bytes it sent: once, when the run's last step is reduced
/// (it reported at its start before, so DDP's bytes read 0 in --summary-json).
void report_done(peer_actor* self, const peer_settings& cfg) {
  auto& st = self->state;
  if (st.done_sent)
    return;
  st.done_sent = true;
  run_summary s;
  s.actor = cfg.name;
  s.bytes_sent = static_cast<std::int64_t>(st.bytes_sent);
  self->send(st.runner, done_atom::value, std::move(s));
}

/// Writes the reduced values back into the stage's gradients and tells it.
void finish(peer_actor* self, const peer_settings& cfg, flight_it it) {
  auto& f = it->second;
  f.write_back(f.bucket.tensors);
  span s;
  s.actor = self->state.trace_id, s.kind = span_kind::sync;
  s.step = static_cast<std::int32_t>(f.bucket.step), s.microbatch = f.bucket.bucket;
  s.bytes = static_cast<std::uint64_t>(f.plan.elements) * sizeof(float);
  s.begin_ns = f.started_ns, s.end_ns = trace_now();
  trace_recorder::global().record(s);
  self->send(self->state.actors.at(static_cast<std::size_t>(cfg.stage)), reduced_atom::value, f.bucket.step,
             f.bucket.bucket);
  bool last_step = f.bucket.step + 1 >= cfg.steps;
  self->state.flights.erase(it);
  if (last_step && ++self->state.last_step_reduced >= cfg.buckets)
    report_done(self, cfg);
}

/// Sends, applies and finishes what the ring's bookkeeping says.
void run(peer_actor* self, const peer_settings& cfg, std::vector<ring_book::event> events) {
  run_ring(self, cfg, std::move(events), [&](const ring_book::event&, flight_it it) { finish(self, cfg, it); });
}

caf::behavior allreduce_peer(peer_actor* self, peer_settings cfg, caf::actor runner) {
  self->state.runner = std::move(runner);
  self->state.trace_id = trace_recorder::global().register_actor(cfg.name, "allreduce_peer");
  self->state.ring = std::make_unique<ring_book>(cfg.name, cfg.members, cfg.rank, false);
  return {
    [=](connect_atom, const connect_msg& m) -> caf::result<caf::ok_atom> {
      store_directory(m, self->state.actors, self->state.actor_ids);
      return caf::ok_atom::value;
    },
    [=](start_atom) {
      if (cfg.first_step >= cfg.steps || cfg.buckets <= 0) // nothing left to reduce
        report_done(self, cfg);
    },
    [=](bucket_atom, bucket_msg& m) {
      guarded(self, cfg.name, "bucket", m.step, [&] {
        ring_key k{m.step, static_cast<int>(m.bucket)};
        auto& f = self->state.flights[k];
        f.take(std::move(m), cfg.members, cfg.rank);
        run(self, cfg, self->state.ring->take(k, f.plan.elements));
      });
    },
    [=](ring_atom, ring_msg& m) {
      trace_recorder::global().message_received(self->state.trace_id);
      guarded(self, cfg.name, "ring", m.step, [&] {
        run(self, cfg, self->state.ring->receive({m.step, m.bucket}, m.phase, std::move(m.chunk)));
      });
    },
  };
}

} // namespace

void expand_ring(section_expansion& e, int replicas, const std::function<std::string(int, int)>& stage,
                 const std::string& type, const std::string& suffix, helper_links links) {
  auto& g = e.graph;
  auto peer = [&](int r, int s) { return stage(r, s) + suffix; };
  auto edge = [&](std::string from, std::string to) {
    channel_spec c;
    c.from = std::move(from), c.to = std::move(to);
    c.expanded = true, c.pos = e.where;
    g.channels.push_back(std::move(c));
  };
  for (int r = 0; r < replicas; ++r)
    for (int s = 0; s < g.pipeline.stages; ++s) {
      actor_spec a;
      a.name = peer(r, s);
      a.type = type;
      a.params["stage"] = YAML::Node(stage(r, s));
      a.expanded = true;
      a.pos = e.where;
      g.actors.push_back(std::move(a));
      edge(stage(r, s), peer(r, s)); // buckets
      edge(peer(r, s), stage(r, s)); // their sums
      if (links == helper_links::ring)
        edge(peer(r, s), peer((r + 1) % replicas, s)); // the ring
      else
        for (int o = 0; o < replicas; ++o)
          if (o != r)
            edge(peer(r, s), peer(o, s)); // to every other replica's
    }
}

void expand_allreduce_ring(section_expansion& e, int replicas, const std::function<std::string(int, int)>& stage) {
  // An elastic launch's peers send to every other replica's (allreduce_direct.cpp).
  expand_ring(e, replicas, stage, "allreduce_peer", "_ar",
              e.graph.elastic_ddp() ? helper_links::all_pairs : helper_links::ring);
}

actor_type_info stage_helper_info() {
  actor_type_info info;
  info.keys = {"stage"};
  info.role.placement = actor_placement::with_stage;
  return info;
}

int helper_of(const graph_spec& g, const std::string& type, const std::string& stage) {
  for (std::size_t i = 0; i < g.actors.size(); ++i)
    if (const auto& a = g.actors[i]; a.type == type)
      if (auto s = a.params.find("stage"); s != a.params.end() && s->second.IsScalar() && s->second.Scalar() == stage)
        return static_cast<int>(i);
  return -1;
}

const char* every_step_sync_type(const graph_spec& g) noexcept {
  return g.data_parallel.zero > 0 ? "optimizer_shard" : "allreduce_peer";
}

bool check_serves_stage(const actor_spec& a, const graph_spec& g, diagnostics& out) {
  if (g.served_stage(a))
    return true;
  out.push_back(
    {a.pos, a.name + ".stage", fmt::format("{} '{}' needs 'stage: NAME', a pipeline stage it serves", a.type, a.name)});
  return false;
}

actor_type_info allreduce_peer_info() {
  auto info = stage_helper_info();
  info.check = [](const actor_spec& a, const graph_spec& g, diagnostics& out) {
    if (!check_serves_stage(a, g, out))
      return;
    if (!g.channel_target(a, "allreduce_peer"))
      out.push_back(
        {a.pos, "channels",
         fmt::format("allreduce_peer '{}' needs a channel to the next allreduce_peer of its ring", a.name)});
  };
  return info;
}

caf::expected<caf::actor> spawn_allreduce_peer(spawn_context& ctx) {
  const auto& g = ctx.graph;
  if (g.elastic_ddp()) // a launch that survives a lost replica: direct exchanges, not the ring
    return spawn_allreduce_direct(ctx);
  const auto* stage = g.served_stage(ctx.spec);
  const auto* next = g.channel_target(ctx.spec, "allreduce_peer");
  if (!stage || !next)
    return make_error(errc::invalid_argument,
                      fmt::format("{}: needs a `stage:` it serves and a channel to the next peer", ctx.spec.name));
  peer_settings cfg{
    {ctx.spec.name, g.index_of(stage->name), g.index_of(next->name), g.sync_group_size(),
     stage->replica % g.sync_group_size(), g.data_parallel.wire == "bf16"},
    g.train.steps,
    g.checkpoint.resume_step,
    static_cast<int>(
      sched::make_shard_layout(zero_params(g, *stage), g.data_parallel.bucket, g.sync_group_size(), 0).buckets.size())};
  return caf::actor{ctx.system.spawn(allreduce_peer, std::move(cfg), ctx.runner)};
}

} // namespace troupe
