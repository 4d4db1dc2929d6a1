// The outer_sync actor (#13): serves one stage of one replica in local-update
// training. It keeps the stage's saved global values and outer optimizer
// (schedulers/streaming_diloco.hpp); when the stage prepares a fragment it
// sends the quantized pseudo-gradient to the outer_sync of every other replica
// at its position; when all have arrived and the stage performs, it applies the
// f32 mean and hands the stage its new values. No global loop, no ring every step.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/actor/outer_messages.hpp"
#include "runtime/trace/trace.hpp"
#include "schedulers/quantize.hpp"
#include "schedulers/streaming_diloco.hpp"

namespace troupe {

namespace {

/// Values travel in rows of this many, each with its own scale when quantized.
constexpr std::int64_t row_values = 1024;

struct sync_settings {
  std::string name;
  int stage = 0;               ///< the stage it serves (actor index)
  int replica = 0, replicas = 1;
  std::vector<int> peers;      ///< the outer_sync of every replica at this position, by replica (-1: itself)
  local_update_spec spec;
};

/// One fragment's exchange under way: the parts by replica, and the stage's values to mix.
struct exchange {
  step_t prepared = -1;
  std::vector<std::optional<sched::quantized_rows>> parts;
  std::optional<std::pair<step_t, std::vector<float>>> perform;
};

struct outer_sync_state {
  std::vector<caf::actor> actors;
  caf::actor runner;
  std::unique_ptr<sched::streaming_diloco> policy;
  std::map<int, exchange> current;                            ///< fragment -> its exchange under way
  std::map<std::pair<step_t, int>, std::vector<outer_part_msg>> early;  ///< parts before their prepare
  std::uint64_t bytes_sent = 0;
  std::uint16_t trace_id = 0;
  static inline const char* name = "outer_sync";
};

using sync_actor = caf::stateful_actor<outer_sync_state>;

sched::quantized_rows from_wire(outer_part_msg m) {
  sched::quantized_rows q;
  q.format = static_cast<sched::wire_format>(m.format);
  q.values = m.values, q.cols = m.cols, q.data = std::move(m.data), q.scales = std::move(m.scales);
  return q;
}

/// Applies fragment `f`'s exchange once every part and the stage's perform are in.
void maybe_apply(sync_actor* self, const sync_settings& cfg, int f) {
  auto& st = self->state;
  auto it = st.current.find(f);
  if (it == st.current.end() || !it->second.perform)
    return;
  for (const auto& p : it->second.parts)
    if (!p)
      return;
  std::vector<sched::quantized_rows> parts;
  for (auto& p : it->second.parts)
    parts.push_back(std::move(*p));
  auto mean = sched::reduce_mean(parts);  // by replica order: every replica gets the same mean
  auto [step, local] = std::move(*it->second.perform);
  st.current.erase(it);
  span s;
  s.actor = st.trace_id, s.kind = span_kind::sync, s.step = static_cast<std::int32_t>(step), s.microbatch = f;
  s.begin_ns = trace_now();
  st.policy->perform(f, mean, local);
  s.end_ns = trace_now();
  s.bytes = local.size() * sizeof(float);
  trace_recorder::global().record(s);
  self->send(st.actors.at(static_cast<std::size_t>(cfg.stage)), outer_done_atom::value,
             outer_result_msg{step, f, std::move(local)});
}

void on_part(sync_actor* self, const sync_settings& cfg, outer_part_msg m) {
  auto& st = self->state;
  auto it = st.current.find(m.fragment);
  if (it == st.current.end() || it->second.prepared != m.step) {
    st.early[{m.step, m.fragment}].push_back(std::move(m));  // this replica has not prepared it yet
    return;
  }
  if (m.replica < 0 || m.replica >= cfg.replicas)
    throw std::runtime_error(fmt::format("{}: a part from replica {} of {}", cfg.name, m.replica, cfg.replicas));
  int f = m.fragment, r = m.replica;
  it->second.parts[static_cast<std::size_t>(r)] = from_wire(std::move(m));
  maybe_apply(self, cfg, f);
}

void on_local(sync_actor* self, const sync_settings& cfg, outer_local_msg& m) {
  auto& st = self->state;
  if (m.kind == outer_local_msg::start) {
    st.policy = std::make_unique<sched::streaming_diloco>(cfg.spec, std::move(m.values));
    return;
  }
  if (!st.policy || m.values.size() != 1)
    throw std::runtime_error(fmt::format("{}: fragment values before the start values", cfg.name));
  auto& local = m.values.front();
  if (m.kind == outer_local_msg::perform) {
    auto it = st.current.find(m.fragment);
    if (it == st.current.end())
      throw std::runtime_error(fmt::format("{}: fragment {} performed at step {} before it was prepared", cfg.name,
                                           m.fragment, m.step));
    it->second.perform.emplace(m.step, std::move(local));
    maybe_apply(self, cfg, m.fragment);
    return;
  }
  auto format = sched::parse_wire_format(cfg.spec.quantize).value_or(sched::wire_format::f32);
  auto q = sched::quantize_rows(st.policy->prepare(m.fragment, local), row_values, format);
  auto& ex = st.current[m.fragment];
  ex.prepared = m.step;
  ex.parts.assign(static_cast<std::size_t>(cfg.replicas), std::nullopt);
  for (int r = 0; r < cfg.replicas; ++r) {
    if (r == cfg.replica)
      continue;
    outer_part_msg part{m.step, m.fragment, cfg.replica, static_cast<std::int32_t>(q.format), q.values, q.cols,
                        q.data, q.scales};
    span s;
    s.actor = st.trace_id, s.kind = span_kind::send, s.step = static_cast<std::int32_t>(m.step);
    s.microbatch = m.fragment, s.bytes = q.wire_bytes();
    s.begin_ns = s.end_ns = trace_now();
    trace_recorder::global().record(s);
    st.bytes_sent += q.wire_bytes();
    self->send(st.actors.at(static_cast<std::size_t>(cfg.peers[static_cast<std::size_t>(r)])),
               outer_part_atom::value, std::move(part));
  }
  ex.parts[static_cast<std::size_t>(cfg.replica)] = std::move(q);
  auto early = st.early.extract({m.step, m.fragment});
  if (!early.empty())
    for (auto& p : early.mapped())
      on_part(self, cfg, std::move(p));
  maybe_apply(self, cfg, m.fragment);
}

caf::behavior outer_sync(sync_actor* self, sync_settings cfg, caf::actor runner) {
  self->state.runner = std::move(runner);
  self->state.trace_id = trace_recorder::global().register_actor(cfg.name, "outer_sync");
  auto guarded = [self, cfg](auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      self->send(self->state.runner, failed_atom::value, failure_msg{cfg.name, e.what()});
      self->quit();
    }
  };
  return {
    [=](connect_atom, const connect_msg& m) -> caf::result<caf::ok_atom> {
      for (const auto& p : m.directory)
        self->state.actors.push_back(p.handle);
      return caf::ok_atom::value;
    },
    [=](start_atom) {
      run_summary s;  // it serves its stage until the run ends
      s.actor = cfg.name;
      self->send(self->state.runner, done_atom::value, std::move(s));
    },
    [=](outer_atom, outer_local_msg& m) { guarded([&] { on_local(self, cfg, m); }); },
    [=](outer_part_atom, outer_part_msg& m) {
      trace_recorder::global().message_received(self->state.trace_id);
      guarded([&] { on_part(self, cfg, std::move(m)); });
    },
  };
}

} // namespace

int outer_sync_of(const graph_spec& g, const std::string& stage) {
  for (std::size_t i = 0; i < g.actors.size(); ++i)
    if (const auto& a = g.actors[i]; a.type == "outer_sync")
      if (auto s = a.params.find("stage"); s != a.params.end() && s->second.IsScalar() && s->second.Scalar() == stage)
        return static_cast<int>(i);
  return -1;
}

void expand_outer_sync(section_expansion& e, int replicas, const std::function<std::string(int, int)>& stage) {
  // Fragment values in, the values after the exchange out, pseudo-gradients to every other replica.
  expand_ring(e, replicas, stage, "outer_sync", "_sync", helper_links::all_pairs);
}

actor_type_info outer_sync_info() {
  auto info = stage_helper_info();
  info.check = [](const actor_spec& a, const graph_spec& g, diagnostics& out) {
    check_serves_stage(a, g, out);
    if (!g.local_update.present)
      out.push_back({a.pos, a.name, fmt::format("outer_sync '{}' needs a local_update: section", a.name)});
    const auto& algo = g.local_update.algorithm;
    auto first = std::find_if(g.actors.begin(), g.actors.end(), [](const actor_spec& x) { return x.type == "outer_sync"; });
    if (!g.local_update.present || &a != &*first)
      return;  // what follows is said once
    if (algo != "diloco" && algo != "streaming_diloco")
      out.push_back({g.where("local_update.algorithm"), "local_update.algorithm",
                     fmt::format("algorithm '{}' does not train yet (training runs diloco and streaming_diloco)",
                                 algo)});
    if (g.checkpoint.present)
      out.push_back({g.where("checkpoint"), "checkpoint",
                     "local_update keeps its saved global and outer momentum outside the checkpoints so far: a "
                     "resumed run would lose them"});
    if (g.pipeline.device != "cpu")
      out.push_back({g.where("pipeline.device"), "pipeline.device",
                     fmt::format("local_update trains CPU stages so far, not '{}'", g.pipeline.device)});
  };
  return info;
}

caf::expected<caf::actor> spawn_outer_sync(spawn_context& ctx) {
  const auto& g = ctx.graph;
  const auto* stage = g.served_stage(ctx.spec);
  if (!stage)
    return make_error(errc::invalid_argument, fmt::format("{}: needs a `stage:` it serves", ctx.spec.name));
  sync_settings cfg{ctx.spec.name, g.index_of(stage->name), stage->replica, std::max(g.data_parallel.replicas, 1),
                    {}, g.local_update};
  // The outer_sync of each replica at the stage's position: the stage of that
  // replica with the same layers.
  for (int r = 0; r < cfg.replicas; ++r) {
    int peer = -1;
    for (const auto& a : g.actors)
      if (a.role.holds_layers && a.replica == r && a.layers == stage->layers)
        peer = outer_sync_of(g, a.name);
    if (peer < 0 && r != cfg.replica)
      return make_error(errc::invalid_argument,
                        fmt::format("{}: replica {} has no outer_sync for the layers of {}", ctx.spec.name, r,
                                    stage->name));
    cfg.peers.push_back(peer);
  }
  return caf::actor{ctx.system.spawn(outer_sync, std::move(cfg), ctx.runner)};
}

} // namespace troupe
