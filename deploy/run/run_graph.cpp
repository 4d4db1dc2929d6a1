// Running a graph in this process: the runner side of the protocol that
// runtime/actor/messages.hpp documents (spawn, connect, start, collect done reports).
#include "deploy/run/run_graph.hpp"

#include <signal.h>

#include <cmath>
#include <map>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "deploy/cluster/spawn_and_connect.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/actor/registry.hpp"
#include "runtime/trace/hang_watch.hpp"
#include "runtime/trace/step_stats.hpp"
#include "kernels/cpu/target.hpp"
#include "schedulers/sim/cost_model.hpp"
#include "schedulers/policies/stage_policy.hpp"
#include "schedulers/planners/path_planner.hpp"
#include "schedulers/routing/routing_policy.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;

std::string error_text(const caf::actor_system&, const caf::error& e) {
  return error_message(e);
}

} // namespace

graph_vocabulary troupe_vocabulary() {
  register_builtin_actors();
  auto v = make_vocabulary(sched::policy_names());
  for (const auto& name : sched::policy_names())
    for (const auto& o : sched::policy_options(name))
      v.schedule_options[name].push_back(o.key);
  v.check_schedule_option = [](const std::string& schedule, const std::string& key,
                               const std::string& value) -> std::optional<std::string> {
    for (const auto& o : sched::policy_options(schedule))
      if (o.key == key && o.accepts && !o.accepts(value))
        return o.expected;
    return std::nullopt;
  };
  v.check_schedule_shape = [](const std::string& schedule, int stages, int chunks,
                              int microbatches) -> std::optional<std::string> {
    sched::policy_params p;
    p.ranks = stages, p.chunks = chunks, p.microbatches = microbatches;
    auto made = sched::make_policy(schedule, p);
    return made ? std::nullopt : std::optional{made.error().message};
  };
  for (const auto& name : sched::routing_names())
    v.routing_options[name] = sched::routing_options(name);
  for (const auto& name : sched::path_planner_names())
    if (const auto* p = sched::find_path_planner(name))
      v.planners.emplace_back(name, p->options);
  v.sim_devices = sched::device_preset_names();
  return v;
}

load_result load_graph_for_cli(const std::filesystem::path& file, std::vector<std::string> overrides,
                               bool check_corpus) {
  register_builtin_actors();
  load_options opts;
  opts.overrides = std::move(overrides);
  opts.check_corpus = check_corpus;
  opts.vocabulary = troupe_vocabulary; // read after the graph's plugins registered theirs
  return load_graph(file, opts);
}

std::optional<double> run_result::tokens_per_s() const {
  if (tokens <= 0 || seconds <= 0)
    return std::nullopt;
  return static_cast<double>(tokens) / seconds;
}

std::optional<double> run_result::ms_per_step() const {
  if (steps <= 0 || seconds <= 0)
    return std::nullopt;
  return seconds * 1000.0 / static_cast<double>(steps);
}

void aggregate(run_result& res) {
  res.steps = 0, res.tokens = 0, res.rollbacks = 0;
  res.train_loss.reset(), res.val_loss.reset(), res.val_loss_short.reset();
  step_t loss_steps = -1;
  for (const auto& s : res.summaries) {
    res.steps = std::max(res.steps, s.steps);
    res.tokens += s.tokens;
    res.rollbacks = std::max(res.rollbacks, s.rollbacks); // every stage rolls back the same steps
    if (!std::isnan(s.train_loss) && s.steps >= loss_steps) {
      res.train_loss = s.train_loss;
      loss_steps = s.steps;
    }
    if (!std::isnan(s.val_loss))
      res.val_loss = s.val_loss;
    if (!std::isnan(s.val_loss_short))
      res.val_loss_short = s.val_loss_short;
    if (!s.losses.empty())
      res.losses = s.losses;
  }
}

caf::expected<run_result> run_graph(caf::actor_system& sys, const graph_spec& g, const run_options& opts) {
  caf::scoped_actor self{sys};
  graph_actors actors;
  // Stops every actor and waits until each is gone, so nothing they own
  // outlives this call (their on_exit may touch what the caller frees next).
  auto stop_all = [&] { actors.stop(self, std::chrono::seconds(30)); };
  // 1. spawn, 2. connect: every actor runs here
  if (auto err = spawn_and_connect(
        self, g, [](const actor_spec&) { return true; }, {}, opts.connect_timeout, actors)) {
    stop_all();
    return err;
  }
  // 3. start, 4. collect reports, while the hang detector watches every handler
  hang_watch hangs{g.trace.hang_after_s, 0};
  auto started = clock_type::now();
  auto last_done = started;
  actors.start(self);
  run_result res;
  res.kernel_target = kernels::cpu::kernel_target();
  res.blas_core = kernels::cpu::blas_core();
  res.first_step = g.checkpoint.resume_step;
  std::map<std::string, bool> done;
  std::optional<std::string> failure; // why the run stops early
  run_checkpoints checkpoints{g};
  int signal = 0;
  while (done.size() < g.actors.size() && !failure && signal == 0) {
    self->receive(
      [&](done_atom, run_summary& s) {
        last_done = clock_type::now();
        auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
        auto who = actors.names.count(from) ? actors.names[from] : s.actor;
        done[who] = true;
        res.summaries.push_back(std::move(s));
      },
      [&](checkpoint_atom, checkpoint_msg& m) {
        if (auto err = checkpoints.on_report(m, res))
          failure = std::move(err);
      },
      [&](failed_atom, failure_msg& f) {
        failure = fmt::format("{} failed: {}", describe_actor(g, f.actor, f.step), f.what);
      },
      [&](caf::down_msg& d) {
        actors.alive.erase(d.source);
        auto who = actors.names.count(d.source) ? actors.names[d.source] : std::string{"?"};
        if (d.reason || !done.count(who))
          failure = fmt::format("{} exited before reporting done: {}", describe_actor(g, who),
                                d.reason ? error_text(sys, d.reason) : std::string{"normal exit"});
      },
      caf::after(std::chrono::milliseconds(100)) >> [] {});
    if (opts.timeout.count() > 0 && clock_type::now() - started > opts.timeout && !failure)
      failure = fmt::format("the run did not finish within {} s ({} of {} actors reported done)",
                            opts.timeout.count() / 1000.0, done.size(), g.actors.size());
    if (opts.interrupt)
      signal = opts.interrupt->load();
  }
  stop_all();
  if (signal != 0 && !failure)
    return checkpoints.interrupted(signal, done.size(), g.actors.size());
  if (failure)
    return make_error(errc::actor_failed, checkpoints.explain_failure(std::move(*failure)));
  res.seconds = std::chrono::duration<double>(last_done - started).count();
  aggregate(res);
  return res;
}

run_checkpoints::run_checkpoints(const graph_spec& g) : dir_(g.checkpoint.dir_path) {
  if (g.checkpoint.every > 0 && !dir_.empty())
    tracker_.emplace(dir_, checkpoint_actors(g), g.checkpoint.keep, g.checkpoint.every, g.train.steps);
}

std::optional<std::string> run_checkpoints::on_report(const checkpoint_msg& m, run_result& res) {
  if (!tracker_ || !tracker_->on_report(m.actor, m.step, m.file))
    return std::nullopt;
  auto c = tracker_->commit(m.step);
  if (!c)
    return fmt::format("checkpoint after step {} failed: {}", m.step, error_message(c.error()));
  ++res.checkpoints;
  fmt::print("checkpoint step {} -> {} ({:.1f} MB, {:.0f} ms)\n", c->step, c->folder.string(),
             static_cast<double>(c->bytes) / 1e6, c->write_ms);
  std::fflush(stdout);
  return std::nullopt;
}

std::string run_checkpoints::explain_failure(std::string why) const {
  if (tracker_)
    tracker_->discard_incomplete();
  if (tracker_ && tracker_->last_committed() >= 0)
    why += fmt::format("; the last complete checkpoint, {}, is intact (--resume {})",
                       (dir_ / checkpoint_folder_name(tracker_->last_committed())).string(), dir_.string());
  return why;
}

caf::error run_checkpoints::interrupted(int sig, std::size_t done, std::size_t actors) const {
  return make_error(errc::interrupted,
                    explain_failure(fmt::format("interrupted by {} before the run finished ({} of {} actors done)",
                                                sig == SIGTERM  ? "SIGTERM"
                                                : sig == SIGINT ? "SIGINT"
                                                                : "a signal",
                                                done, actors)));
}

std::string describe_actor(const graph_spec& g, const std::string& name, step_t step) {
  std::vector<std::string> parts;
  if (const auto* a = g.find_actor(name)) {
    parts.push_back(fmt::format("node {}", g.node_of(*a)));
    if (a->role.holds_layers)
      parts.push_back(fmt::format("replica {}, position {}", a->replica, a->rank));
    else if (const auto* s = g.served_stage(*a)) // a stage's helper: all-reduce peer, optimizer shard, sync actor
      parts.push_back(fmt::format("serving {}: replica {}, position {}", s->name, s->replica, s->rank));
  }
  if (step >= 0)
    parts.push_back(fmt::format("in step {}", step + 1));
  return fmt::format("actor '{}'{}", name, parts.empty() ? "" : fmt::format(" ({})", fmt::join(parts, ", ")));
}

nlohmann::json summary_json(const run_result& r, const parameter_count& parameters) {
  auto num = [](std::optional<double> v) {
    return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  auto losses = nlohmann::json::array();
  for (double l : r.losses)
    losses.push_back(num(l));
  // What each actor reported holding and sending (ZeRO's accounting: stages and optimizer shards).
  auto memory = nlohmann::json::object(), sent = nlohmann::json::object();
  for (const auto& s : r.summaries) {
    if (s.params_bytes >= 0)
      memory[s.actor] = {{"params", s.params_bytes}, {"grads", s.grads_bytes}, {"optimizer", s.optimizer_bytes}};
    sent[s.actor] = s.bytes_sent;
  }
  // The stages' step times, each against its peers' at the same step.
  std::vector<step_times> steps;
  for (const auto& s : r.summaries)
    if (!s.step_busy_ns.empty()) {
      auto& t = steps.emplace_back(step_times{s.actor, std::string{stage_role}, s.position, {}});
      for (std::size_t i = 0; i < s.step_busy_ns.size(); ++i)
        if (s.step_busy_ns[i] > 0) // a routed stage may sit a step out
          t.busy[static_cast<std::int32_t>(r.first_step + static_cast<std::int64_t>(i))] = s.step_busy_ns[i];
    }
  auto text = [](const std::string& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v); };
  return {{"steps", r.steps},
          {"tokens_per_s", num(r.tokens_per_s())},
          {"ms_per_step", num(r.ms_per_step())},
          {"train_loss", num(r.train_loss)},
          {"val_loss", num(r.val_loss)},
          {"val_loss_short", num(r.val_loss_short)},
          {"first_step", r.first_step},
          {"restarts", r.restarts},
          {"rollbacks", r.rollbacks},
          {"losses", losses},
          {"parameters", to_json(parameters)},
          {"memory", memory},
          {"bytes_sent", sent},
          {"stragglers", to_json(analyze_step_times(steps))},
          {"kernel_target", text(r.kernel_target)},
          {"blas_core", text(r.blas_core)}};
}

} // namespace troupe
