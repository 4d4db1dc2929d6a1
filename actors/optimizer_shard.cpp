// The optimizer_shard actor (ZeRO stages 1 and 2, Rajbhandari et al. 2020): one
// per replica and pipeline position, the ring member of its stage. It
// reduce-scatters each gradient bucket over the replicas, owns the AdamW state
// of its slice of the position's parameters (schedulers/sync/zero_shard.hpp),
// updates that slice once the global norm is known, and all-gathers the
// updated parameters back into its stage.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "actors/ring_member.hpp"
#include "actors/zero_shard_state.hpp"
#include "ops/grad_clip.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/trace/trace.hpp"

namespace troupe {

namespace {

struct shard_settings : ring_settings {
  std::int64_t steps = 0; ///< train.steps: it reports done after the last one's gather
  zero_checkpointing ck;
};

/// One bucket of one step: its flat buffer only while a ring phase needs it.
struct flight : ring_flight {
  tensor_handle kept; ///< the loss bucket: its reduced chunk, kept for the gather
};

struct optimizer_shard_state {
  std::vector<caf::actor> actors;
  std::vector<std::uint16_t> actor_ids;
  caf::actor runner;
  std::unique_ptr<zero_shard> shard;
  std::unique_ptr<ring_book> ring; ///< which chunk goes and comes when
  std::map<ring_key, flight> flights;
  int gathered = 0; ///< buckets of the current update back in the stage
  std::int64_t bytes_sent = 0;
  bool done_sent = false;
  std::uint16_t trace_id = 0;
  static inline const char* name = "optimizer_shard";
};

using shard_actor = caf::stateful_actor<optimizer_shard_state>;
using flight_it = std::map<ring_key, flight>::iterator;

void report_done(shard_actor* self, const shard_settings& cfg) {
  auto& st = self->state;
  if (st.done_sent)
    return;
  st.done_sent = true;
  run_summary s;
  s.actor = cfg.name;
  auto held = st.shard->held();
  s.params_bytes = held.params, s.grads_bytes = held.grads, s.optimizer_bytes = held.optimizer;
  s.bytes_sent = st.bytes_sent;
  self->send(st.runner, done_atom::value, std::move(s));
}

/// The reduce-scatter of a bucket is done: the shard keeps its slice, tells the stage.
void scattered(shard_actor* self, flight_it it) {
  auto& f = it->second;
  auto b = it->first.bucket;
  auto& shard = *self->state.shard;
  double sq = 0;
  if (b == shard.loss_bucket()) {
    auto n = f.plan.chunk_elements(); // the step's loss sum, reduced in one member's chunk
    f.kept = tensor_handle::empty({n});
    std::memcpy(f.kept.raw(), f.flat.data<float>() + f.plan.owned_chunk() * n, f.kept.nbytes());
  } else {
    sq = shard.keep_gradients(b, f.flat.data<float>(), f.bucket.tensors);
  }
  f.flat = {};
  self->send(self->state.actors.at(static_cast<std::size_t>(self->state.shard->stage())), reduced_atom::value,
             it->first.step, static_cast<std::int32_t>(b), sq);
}

/// The all-gather of a bucket is done: the parameters (and the loss) go into the stage.
void gathered(shard_actor* self, const shard_settings& cfg, flight_it it) {
  auto& st = self->state;
  auto& f = it->second;
  f.write_back(it->first.bucket == st.shard->loss_bucket() ? f.bucket.tensors : f.bucket.params);
  auto step = it->first.step;
  st.flights.erase(it);
  if (++st.gathered < st.shard->buckets())
    return;
  st.gathered = 0;
  self->send(st.actors.at(static_cast<std::size_t>(cfg.stage)), updated_atom::value, step);
  if (cfg.ck.due(step + 1))
    self->send(st.runner, checkpoint_atom::value,
               checkpoint_msg{cfg.name, step + 1, cfg.ck.write(*st.shard, step + 1, cfg.name)});
  if (step + 1 >= cfg.steps)
    report_done(self, cfg);
}

/// Sends, applies, scatters and gathers what the ring's bookkeeping says.
void run(shard_actor* self, const shard_settings& cfg, std::vector<ring_book::event> events) {
  run_ring(self, cfg, std::move(events), [&](const ring_book::event& e, flight_it it) {
    if (e.what == ring_book::kind::scattered)
      scattered(self, it);
    else
      gathered(self, cfg, it);
  });
}

/// The stage's update: AdamW on the slice, then every bucket's all-gather.
void update(shard_actor* self, const shard_settings& cfg, step_t step, float lr, float clip) {
  auto& st = self->state;
  auto& shard = *st.shard;
  for (int b = 0; b < shard.buckets(); ++b)
    if (auto it = st.flights.find({step, b}); it == st.flights.end() || it->second.flat.defined())
      throw std::runtime_error(
        fmt::format("{}: asked to update step {} before bucket {} was reduce-scattered", cfg.name, step, b));
  shard.update(lr, clip);
  for (int b = 0; b < shard.buckets(); ++b) {
    auto it = st.flights.find({step, b});
    auto& f = it->second;
    f.flat = tensor_handle::zeros({f.plan.padded()});
    if (b == shard.loss_bucket())
      std::memcpy(f.flat.data<float>() + f.plan.owned_chunk() * f.plan.chunk_elements(), f.kept.raw(), f.kept.nbytes());
    else
      shard.write_parameters(b, f.flat.data<float>());
    run(self, cfg, st.ring->gather({step, b}));
  }
}

caf::behavior optimizer_shard(shard_actor* self, shard_settings cfg, std::unique_ptr<zero_shard> shard,
                              caf::actor runner) {
  self->state.runner = std::move(runner);
  self->state.shard = std::move(shard);
  self->state.ring = std::make_unique<ring_book>(cfg.name, cfg.members, cfg.rank, true);
  self->state.trace_id = trace_recorder::global().register_actor(cfg.name, "optimizer_shard");
  return {
    [=](connect_atom, const connect_msg& m) -> caf::result<caf::ok_atom> {
      store_directory(m, self->state.actors, self->state.actor_ids);
      if (auto err = cfg.ck.restore(*self->state.shard, cfg.name))
        return err;
      return caf::ok_atom::value;
    },
    [=](start_atom) {
      record_held(cfg.name, self->state.shard->held());
      if (cfg.ck.resume_step >= cfg.steps)
        report_done(self, cfg);
    },
    [=](bucket_atom, bucket_msg& m) {
      guarded(self, cfg.name, "bucket", m.step, [&] {
        ring_key k{m.step, static_cast<int>(m.bucket)};
        auto& f = self->state.flights[k];
        f.take(std::move(m), cfg.members, cfg.rank);
        if (k.bucket != self->state.shard->loss_bucket())
          self->state.shard->bind_parameters(k.bucket, f.bucket.params);
        run(self, cfg, self->state.ring->take(k, f.plan.elements));
      });
    },
    [=](ring_atom, ring_msg& m) {
      trace_recorder::global().message_received(self->state.trace_id);
      guarded(self, cfg.name, "ring", m.step, [&] {
        run(self, cfg, self->state.ring->receive({m.step, m.bucket}, m.phase, std::move(m.chunk)));
      });
    },
    [=](shard_step_atom, step_t step, float lr, float clip) {
      guarded(self, cfg.name, "shard step", step, [&] {
        scoped_span s(self->state.trace_id, span_kind::optimizer, static_cast<std::int32_t>(step));
        update(self, cfg, step, lr, clip);
      });
    },
  };
}

} // namespace

void expand_zero_shards(section_expansion& e, int replicas, const std::function<std::string(int, int)>& stage) {
  expand_ring(e, replicas, stage, "optimizer_shard", "_os",
              e.graph.elastic_ddp() ? helper_links::all_pairs : helper_links::ring);
}

actor_type_info optimizer_shard_info() {
  auto info = stage_helper_info();
  info.check = [](const actor_spec& a, const graph_spec& g, diagnostics& out) {
    if (auto ring = zero_ring_of(g, a); !ring)
      out.push_back({a.pos, a.name + ".stage", error_message(ring.error())});
    else if (g.data_parallel.zero == 0)
      out.push_back({a.pos, a.name, fmt::format("optimizer_shard '{}' needs data_parallel.zero: 1 or 2", a.name)});
  };
  info.role.checkpoint_identity = [](const graph_spec& g, const actor_spec& a) {
    auto ring = zero_ring_of(g, a);
    std::map<std::string, std::string> id{{"zero", std::to_string(g.data_parallel.zero)},
                                          {"replicas", std::to_string(g.data_parallel.replicas)},
                                          {"bucket", std::to_string(g.data_parallel.bucket)}};
    if (ring)
      id["stage"] = ring->stage->name;
    return id;
  };
  info.role.check_checkpoint_part = [](const graph_spec& g, const actor_spec& a,
                                       const safetensors_header& part) -> std::optional<std::string> {
    auto ring = zero_ring_of(g, a);
    if (!ring)
      return error_message(ring.error());
    return zero_shard{g, *ring->stage, ring->rank, ring->stage_index}.check_part(part);
  };
  return info;
}

caf::expected<caf::actor> spawn_optimizer_shard(spawn_context& ctx) {
  const auto& g = ctx.graph;
  if (g.elastic_ddp()) // a launch that survives a lost replica: direct exchanges and mirrored slices, not the ring
    return spawn_optimizer_shard_direct(ctx);
  auto ring = zero_ring_of(g, ctx.spec);
  if (!ring)
    return ring.error();
  auto shard = std::make_unique<zero_shard>(g, *ring->stage, ring->rank, ring->stage_index);
  // Parts built first and moved in: GCC 12 reports a false "may be used
  // uninitialized" on the name when a later part of one aggregate may throw.
  zero_checkpointing ck{part_checkpointing::of(g, ctx.spec)};
  ring_settings peer{ctx.spec.name, ring->stage_index, ring->next_index, g.sync_group_size(), ring->rank};
  shard_settings cfg{std::move(peer), g.train.steps, std::move(ck)};
  return caf::actor{ctx.system.spawn(optimizer_shard, std::move(cfg), std::move(shard), ctx.runner)};
}

} // namespace troupe
