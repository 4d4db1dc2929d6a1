// The outer_sync actor (#13): serves one stage of one replica in local-update
// training. It runs its method's sync policy (schedulers/sync/sync_policy.hpp):
// when the stage prepares a fragment it sends what the policy says to the
// outer_sync actors of the replicas the policy names; it passes their messages
// to the policy; when the exchange is complete and the stage performs, it hands
// the stage its new values. No global loop, no ring every step. At each
// checkpoint it writes its method's state as its own part (#25 item 4).
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "actors/outer_sync_checkpoint.hpp"
#include "actors/boundary/step_boundary.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/actor/outer_messages.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/trace/hang_watch.hpp"
#include "runtime/trace/trace.hpp"
#include "schedulers/sync/sync_peer.hpp"

namespace troupe {

namespace {

struct sync_settings {
  std::string name;
  int stage = 0; ///< the stage it serves (actor index)
  int replica = 0, replicas = 1;
  std::vector<int> peers; ///< the outer_sync of every replica at this position, by replica (-1: itself)
  local_update_spec spec;
  std::uint64_t seed = 0; ///< data.seed (NoLoCo's groups)
  long exchanges = 0;     ///< performs due in the whole run: it reports done after the last
  part_checkpointing ck;
  long checkpoints = 0; ///< parts due in this run: it reports done after the last of these too
  /// An emulated stuck exchange (`stall: {step, for}`): the handler of the
  /// first stage values at or after 0-based step `stall_step` sleeps this long first.
  std::int64_t stall_step = -1;
  double stall_s = 0;
  /// A lost replica's sync actor in a process that replaces its node (#26): it
  /// starts from a live replica's state, taking no other message before.
  bool joining = false;
};

struct outer_sync_state {
  std::vector<caf::actor> actors;
  caf::actor runner;
  std::optional<sched::sync_peer> peer;     ///< the policy and its bookkeeping
  std::optional<sched::sync_state> resumed; ///< the method's saved state, until the start values make the policy
  std::optional<step_t> save_at;            ///< a checkpoint due once the performs of its step are applied
  long saved = 0;                           ///< parts written in this run
  bool done_sent = false;
  std::uint16_t trace_id = 0;
  std::int64_t stall_step = -1;     ///< sync_settings::stall_step until the stall happened
  long checkpoints = 0;             ///< parts due in this run (from the joining step on, for a joiner)
  std::optional<rejoin_msg> donate; ///< a rejoining replica that takes this one's state (#26)
  static inline const char* name = "outer_sync";
};

using sync_actor = caf::stateful_actor<outer_sync_state>;

void report_done(sync_actor* self, const sync_settings& cfg) {
  auto& st = self->state;
  if (st.done_sent || st.peer->performed() < cfg.exchanges || st.saved < st.checkpoints)
    return;
  st.done_sent = true;
  run_summary s;
  s.actor = cfg.name;
  s.bytes_sent = st.peer->bytes_sent();
  self->send(st.runner, done_atom::value, std::move(s));
}

void send_all(sync_actor* self, const sync_settings& cfg, std::vector<sched::sync_part> parts) {
  auto& st = self->state;
  for (auto& m : parts) {
    auto& q = m.payload;
    span s;
    s.actor = st.trace_id, s.kind = span_kind::send, s.step = static_cast<std::int32_t>(m.step);
    s.microbatch = m.fragment, s.bytes = q.wire_bytes();
    s.begin_ns = s.end_ns = trace_now();
    trace_recorder::global().record(s);
    self->send(st.actors.at(static_cast<std::size_t>(cfg.peers[static_cast<std::size_t>(m.to)])),
               outer_part_atom::value,
               outer_part_msg{m.step, m.fragment, cfg.replica, m.round, m.piece, static_cast<std::int32_t>(q.format),
                              q.values, q.cols, std::move(q.data), std::move(q.scales)});
  }
}

/// Writes the checkpoint part that is due once no perform of its step waits:
/// the method's state, the exchanges performed and those under way (an
/// exchange prepared τ steps ahead is saved by its method and starts again on a resume).
void maybe_save(sync_actor* self, const sync_settings& cfg) {
  auto& st = self->state;
  if (!st.save_at || st.peer->performs_waiting())
    return;
  auto step = *std::exchange(st.save_at, std::nullopt);
  outer_sync_saved saved{st.peer->save(), st.peer->performed(), st.peer->prepared()};
  auto file = cfg.ck.write(cfg.name, step, outer_sync_tensors(saved.state), outer_sync_metadata(saved));
  ++st.saved;
  self->send(st.runner, checkpoint_atom::value, checkpoint_msg{cfg.name, step, std::move(file)});
}

/// Sends the rejoining replica's sync actor this one's state, once every
/// exchange the stage performs in its first donate->steps steps is applied (#26).
void maybe_donate(sync_actor* self, const sync_settings& cfg) {
  auto& st = self->state;
  if (!st.donate)
    return;
  const auto* method = sched::find_sync_method(cfg.spec.algorithm);
  auto due = sched::performs_through(*method, cfg.spec, st.donate->steps);
  if (st.peer->performed() > due)
    throw std::runtime_error(fmt::format("{}: replica {} is to rejoin with this one's state after step {}, but it "
                                         "applied a later exchange already",
                                         cfg.name, st.donate->replica, st.donate->steps));
  if (st.peer->performed() < due || st.peer->performs_waiting() || !st.peer->prepared().empty())
    return;
  outer_sync_saved saved{st.peer->save(), st.peer->performed(), st.peer->prepared()};
  safetensors_file f{outer_sync_tensors(saved.state), outer_sync_metadata(saved)};
  self->send(st.actors.at(static_cast<std::size_t>(st.donate->to)), state_atom::value,
             to_state_msg(st.donate->steps, cfg.replica, f));
  st.donate.reset();
}

/// A lost replica comes back (#26): in the exchanges after m.steps steps; and
/// when this replica is the donor, the joiner's sync actor gets its state.
void on_rejoin(sync_actor* self, const sync_settings& cfg, const rejoin_msg& m) {
  auto& st = self->state;
  if (!st.peer->rejoin(m.replica, m.steps, m.losses))
    return; // lost again on its way back, after the loader decided: it stays out
  if (m.to >= 0) {
    st.donate = m;
    maybe_donate(self, cfg);
  }
}

/// Applies each exchange the policy has all it needs for and the stage performed.
void apply_ready(sync_actor* self, const sync_settings& cfg) {
  auto& st = self->state;
  for (int f : st.peer->applicable()) {
    span s;
    s.actor = st.trace_id, s.kind = span_kind::sync, s.microbatch = f;
    s.begin_ns = trace_now();
    auto [step, local] = st.peer->apply(f);
    s.end_ns = trace_now();
    s.step = static_cast<std::int32_t>(step);
    s.bytes = local.size() * sizeof(float);
    trace_recorder::global().record(s);
    self->send(st.actors.at(static_cast<std::size_t>(cfg.stage)), outer_done_atom::value,
               outer_result_msg{step, f, std::move(local)});
    // The outer steps and exchange bytes so far: the dashboard's table, /metrics.
    auto& tr = trace_recorder::global();
    tr.count("outer:" + cfg.name + ":steps", static_cast<double>(st.peer->performed()),
             static_cast<std::int32_t>(step) - 1);
    tr.count("outer:" + cfg.name + ":bytes", static_cast<double>(st.peer->bytes_sent()),
             static_cast<std::int32_t>(step) - 1);
    maybe_save(self, cfg);
    maybe_donate(self, cfg);
    report_done(self, cfg);
  }
}

void on_part(sync_actor* self, const sync_settings& cfg, outer_part_msg m) {
  sched::sync_part p{m.step, m.fragment, m.replica, cfg.replica, m.round, m.piece, {}};
  p.payload.format = static_cast<sched::wire_format>(m.format);
  p.payload.values = m.values, p.payload.cols = m.cols;
  p.payload.data = std::move(m.data), p.payload.scales = std::move(m.scales);
  send_all(self, cfg, self->state.peer->receive(std::move(p)));
  apply_ready(self, cfg);
}

/// A replica left the run (its node was lost): the policy stops waiting for it.
void on_lost(sync_actor* self, const sync_settings& cfg, int replica) {
  send_all(self, cfg, self->state.peer->lose(replica));
  apply_ready(self, cfg);
}

void on_local(sync_actor* self, const sync_settings& cfg, outer_local_msg& m) {
  auto& st = self->state;
  auto& peer = *st.peer;
  if (m.kind == outer_local_msg::start) {
    const auto* method = sched::find_sync_method(cfg.spec.algorithm);
    if (!method)
      throw std::runtime_error(fmt::format("{}: no local-update method '{}'", cfg.name, cfg.spec.algorithm));
    sched::sync_setup setup{cfg.spec, cfg.replica, cfg.replicas, cfg.seed, std::move(m.values)};
    std::vector<sched::sync_part> sends;
    const bool resumed = st.resumed.has_value();
    try { // a resumed run: the method takes up its saved state, the exchanges under way start again
      sends = peer.start(*method, std::move(setup), std::exchange(st.resumed, std::nullopt));
    } catch (const std::exception& e) {
      if (!resumed)
        throw;
      throw std::runtime_error(fmt::format("{}: {}", cfg.ck.resume_file(cfg.name), e.what()));
    }
    send_all(self, cfg, std::move(sends));
    apply_ready(self, cfg);
    return;
  }
  if (m.kind == outer_local_msg::save) {
    if (st.save_at)
      throw std::runtime_error(fmt::format("{}: the checkpoint after step {} asked for while the one after step {} "
                                           "waits",
                                           cfg.name, m.step, *st.save_at));
    st.save_at = m.step;
    maybe_save(self, cfg);
    report_done(self, cfg);
    return;
  }
  if (m.values.size() != 1)
    throw std::runtime_error(fmt::format("{}: fragment values before the start values", cfg.name));
  if (auto& s = self->state.stall_step; s >= 0 && m.step >= s) { // once
    s = -1;
    std::this_thread::sleep_for(std::chrono::duration<double>(cfg.stall_s));
  }
  if (m.kind == outer_local_msg::perform)
    peer.perform(m.step, m.fragment, std::move(m.values.front()));
  else
    send_all(self, cfg, peer.prepare(m.step, m.fragment, m.values.front()));
  apply_ready(self, cfg);
}

caf::behavior outer_sync(sync_actor* self, sync_settings cfg, caf::actor runner) {
  self->state.runner = std::move(runner);
  self->state.peer.emplace(cfg.name, cfg.replica, cfg.replicas);
  self->state.trace_id = trace_recorder::global().register_actor(cfg.name, "outer_sync");
  self->state.stall_step = cfg.stall_step;
  self->state.checkpoints = cfg.checkpoints;
  auto guarded = [self, cfg](const char* what, step_t step, auto&& f) {
    handler_scope busy(self->state.trace_id, what);
    try {
      f();
    } catch (const std::exception& e) {
      self->send(self->state.runner, failed_atom::value, failure_msg{cfg.name, e.what(), step});
      self->quit();
    }
  };
  auto connect = [=](connect_atom, const connect_msg& m) -> caf::result<caf::ok_atom> {
    for (const auto& p : m.directory)
      self->state.actors.push_back(p.handle);
    if (cfg.joining)
      return caf::ok_atom::value; // its state comes from a live replica
    auto part = cfg.ck.read(cfg.name);
    if (!part)
      return part.error();
    if (*part) {
      auto& st = self->state;
      try {
        auto saved = read_outer_sync_part(header_of(**part), &**part);
        st.peer->resume_at(saved.performed, std::move(saved.prepared));
        st.resumed = std::move(saved.state);
      } catch (const std::exception& e) {
        return make_error(errc::invalid_argument, fmt::format("{}: {}", cfg.ck.resume_file(cfg.name), e.what()));
      }
    }
    return caf::ok_atom::value;
  };
  caf::behavior running{
    connect,
    [=](start_atom) { report_done(self, cfg); }, // when nothing is to be exchanged or saved in this run
    [=](outer_atom, outer_local_msg& m) { guarded("stage values", m.step, [&] { on_local(self, cfg, m); }); },
    [=](outer_part_atom, outer_part_msg& m) {
      trace_recorder::global().message_received(self->state.trace_id);
      guarded("exchange part", m.step, [&] { on_part(self, cfg, std::move(m)); });
    },
    [=](replica_lost_atom, std::int32_t replica) { guarded("replica lost", -1, [&] { on_lost(self, cfg, replica); }); },
    [=](rejoin_atom, const rejoin_msg& m) { guarded("rejoin", m.steps, [&] { on_rejoin(self, cfg, m); }); },
  };
  if (!cfg.joining)
    return running;
  self->set_default_handler(caf::skip); // everything waits for the state
  return {
    connect,
    [=](state_atom, const state_msg& m) {
      guarded("replica state", m.steps, [&] {
        auto& st = self->state;
        try {
          auto f = state_file(m);
          auto saved = read_outer_sync_part(header_of(f), &f);
          sched::forget_own(*sched::find_sync_method(cfg.spec.algorithm), saved.state); // the donor's own
          st.peer->resume_at(saved.performed, std::move(saved.prepared));
          st.resumed = std::move(saved.state);
        } catch (const std::exception& e) {
          throw std::runtime_error(
            fmt::format("{}: replica {}'s state after step {}: {}", cfg.name, m.replica, m.steps, e.what()));
        }
        st.checkpoints = 0; // the parts due from the joining step on
        for (auto s = m.steps + 1; s <= cfg.ck.steps; ++s)
          st.checkpoints += cfg.ck.due(s);
        self->set_default_handler(caf::print_and_drop);
        self->become(running); // the messages that waited are taken now, in order
      });
    },
  };
}

} // namespace

void expand_outer_sync(section_expansion& e, int replicas, const std::function<std::string(int, int)>& stage) {
  // Fragment values in, the values after the exchange out, pseudo-gradients to every other replica.
  expand_ring(e, replicas, stage, "outer_sync", "_sync", helper_links::all_pairs);
}

actor_type_info outer_sync_info() {
  auto info = stage_helper_info();
  info.keys.push_back("stall");
  info.check = [](const actor_spec& a, const graph_spec& g, diagnostics& out) {
    check_serves_stage(a, g, out);
    check_stall(a, out);
    if (!g.local_update.present)
      out.push_back({a.pos, a.name, fmt::format("outer_sync '{}' needs a local_update: section", a.name)});
    auto first =
      std::find_if(g.actors.begin(), g.actors.end(), [](const actor_spec& x) { return x.type == "outer_sync"; });
    if (!g.local_update.present || &a != &*first)
      return; // what follows is said once
    if (g.pipeline.device != "cpu")
      out.push_back({g.where("pipeline.device"), "pipeline.device",
                     fmt::format("local_update trains CPU stages so far, not '{}'", g.pipeline.device)});
    // A fragment is a share of a stage's parameters: more fragments than values leaves them empty
    // (1,000,000 on a 34k-parameter stage was accepted). The method's plan says how many it cuts.
    const auto* method = sched::find_sync_method(g.local_update.algorithm);
    int pieces = 1;
    if (method && method->fragments)
      for (const auto& f : method->fragments(g.local_update))
        if (f.content == sched::fragment_content::params)
          pieces = std::max(pieces, f.pieces);
    if (pieces > 1) {
      const actor_spec* smallest = nullptr;
      std::int64_t fewest = 0;
      for (const auto& x : g.actors)
        if (x.type == "outer_sync")
          if (const auto* st = g.served_stage(x)) {
            std::int64_t n = 0;
            for (auto elements : outer_tensor_sizes(g, *st))
              n += elements;
            if (!smallest || n < fewest)
              smallest = st, fewest = n;
          }
      if (smallest && pieces > fewest) // the key the built-in methods cut by; its position when written
        out.push_back({g.where("local_update.fragments"), "local_update.fragments",
                       fmt::format("{} fragments for the {} parameters of stage '{}' leave fragments empty: at most {}",
                                   pieces, fewest, smallest->name, fewest)});
    }
  };
  info.role.checkpoint_identity = outer_sync_identity;
  info.role.check_checkpoint_part = check_outer_sync_part;
  return info;
}

caf::expected<caf::actor> spawn_outer_sync(spawn_context& ctx) {
  const auto& g = ctx.graph;
  const auto* stage = g.served_stage(ctx.spec);
  if (!stage)
    return make_error(errc::invalid_argument, fmt::format("{}: needs a `stage:` it serves", ctx.spec.name));
  const int group = g.sync_group_size(), place = stage->replica % group;
  auto where = sync_place_of(g, *stage);
  sync_settings cfg{ctx.spec.name,
                    g.index_of(stage->name),
                    where.replica,
                    where.replicas,
                    {},
                    g.local_update,
                    g.data.seed,
                    0,
                    part_checkpointing::of(g, ctx.spec)};
  cfg.joining = g.cluster.joining;
  for (auto s = cfg.ck.resume_step + 1; s <= g.train.steps; ++s)
    cfg.checkpoints += cfg.ck.due(s);
  if (auto s = ctx.spec.params.find("stall"); s != ctx.spec.params.end()) // checked by outer_sync_info
    if (auto stall = parse_stall(s->second))
      cfg.stall_step = stall->first, cfg.stall_s = stall->second;
  const auto* method = sched::find_sync_method(g.local_update.algorithm);
  if (!method)
    return make_error(errc::invalid_argument,
                      fmt::format("{}: no local-update method '{}'", ctx.spec.name, g.local_update.algorithm));
  try { // the performs of the whole run, from the schedule every stage follows
    auto schedule = method->schedule(g.local_update);
    for (long step = 0; step < g.train.steps; ++step)
      for (auto e : schedule->after_inner_step())
        cfg.exchanges += e.what == sched::fragment_event::kind::perform;
  } catch (const std::exception& e) {
    return make_error(errc::invalid_argument, fmt::format("{}: {}", ctx.spec.name, e.what()));
  }
  // The outer_sync of each group at the stage's position: the stage of that
  // group's replica at this place with the same layers.
  for (int r = 0; r < cfg.replicas; ++r) {
    int peer = -1;
    for (const auto& a : g.actors)
      if (a.role.holds_layers && a.replica == r * group + place && a.layers == stage->layers)
        peer = helper_of(g, "outer_sync", a.name);
    if (peer < 0 && r != cfg.replica)
      return make_error(errc::invalid_argument, fmt::format("{}: replica {} has no outer_sync for the layers of {}",
                                                            ctx.spec.name, r, stage->name));
    cfg.peers.push_back(peer);
  }
  return caf::actor{ctx.system.spawn(outer_sync, std::move(cfg), ctx.runner)};
}

} // namespace troupe
