// Running a graph in this process: the runner side of the protocol that
// runtime/messages.hpp documents (spawn, connect, start, collect done reports).
#include "deploy/run_graph.hpp"

#include <signal.h>

#include <cmath>
#include <map>
#include <set>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "actors/link.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/errors.hpp"
#include "runtime/registry.hpp"
#include "schedulers/stage_policy.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;

std::string error_text(const caf::actor_system&, const caf::error& e) {
  return error_message(e);
}

} // namespace

connect_msg make_connect(const graph_spec& g, const std::string& self,
                         const std::map<std::string, caf::actor>& handles, const link_map& links) {
  connect_msg m;
  m.self = self;
  auto type_of = [&](const std::string& n) { return g.find_actor(n)->type; };
  auto to = [&](const std::string& n) {  // how `self` reaches `n`: through a link, if one is emulated
    auto l = links.find({self, n});
    return l != links.end() ? l->second : handles.at(n);
  };
  for (const auto& c : g.channels) {
    if (c.from == self)
      m.peers.push_back(peer{c.to, type_of(c.to), to(c.to), channel_dir::out, c.credits});
    if (c.to == self)
      m.peers.push_back(peer{c.from, type_of(c.from), to(c.from), channel_dir::in, c.credits});
  }
  for (const auto& a : g.actors)
    m.directory.push_back(peer{a.name, a.type, to(a.name), channel_dir::out, 0});
  return m;
}

link_map spawn_links(caf::actor_system& sys, const graph_spec& g, const std::map<std::string, caf::actor>& handles,
                     const std::function<bool(const channel_spec&)>& here) {
  link_map links;
  for (const auto& c : g.channels)
    if ((c.bandwidth > 0 || c.latency > 0) && here(c)) {
      links[{c.from, c.to}] = spawn_link(sys, handles.at(c.to), c.bandwidth, c.latency);
      links[{c.to, c.from}] = spawn_link(sys, handles.at(c.from), c.bandwidth, c.latency);
    }
  return links;
}

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
  return v;
}

load_result load_graph_for_cli(const std::filesystem::path& file, std::vector<std::string> overrides) {
  register_builtin_actors();
  load_options opts;
  opts.overrides = std::move(overrides);
  opts.vocabulary = troupe_vocabulary;  // read after the graph's plugins registered theirs
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
  res.steps = 0, res.tokens = 0;
  res.train_loss.reset(), res.val_loss.reset();
  step_t loss_steps = -1;
  for (const auto& s : res.summaries) {
    res.steps = std::max(res.steps, s.steps);
    res.tokens += s.tokens;
    if (!std::isnan(s.train_loss) && s.steps >= loss_steps) {
      res.train_loss = s.train_loss;
      loss_steps = s.steps;
    }
    if (!std::isnan(s.val_loss))
      res.val_loss = s.val_loss;
    if (!s.losses.empty())
      res.losses = s.losses;
  }
}

caf::expected<run_result> run_graph(caf::actor_system& sys, const graph_spec& g, const run_options& opts) {
  caf::scoped_actor self{sys};
  std::map<std::string, caf::actor> handles;
  std::map<caf::actor_addr, std::string> names;
  std::set<caf::actor_addr> alive;
  // Stops every actor and waits until each is gone, so nothing they own
  // outlives this call (their on_exit may touch what the caller frees next).
  link_map links;
  auto stop_all = [&] {
    for (auto& [ends, l] : links)
      self->send_exit(l, caf::exit_reason::user_shutdown);
    for (auto& [name, h] : handles)
      self->send_exit(h, caf::exit_reason::user_shutdown);
    bool waiting = true;
    while (waiting && !alive.empty())
      self->receive([&](caf::down_msg& d) { alive.erase(d.source); },
                    caf::after(std::chrono::seconds(30)) >> [&] { waiting = false; });
  };
  // 1. spawn
  for (const auto& a : g.actors) {
    auto type = actor_registry().find(a.type);
    if (!type) {
      stop_all();
      return make_error(errc::unknown_actor_type,
                        fmt::format("{}: actor '{}': type '{}' has no implementation in this build (registered: {})",
                                    to_string(a.pos), a.name, a.type, fmt::join(actor_registry().names(), ", ")));
    }
    spawn_context ctx{sys, a, g, caf::actor_cast<caf::actor>(self)};
    auto h = type->factory.spawn(ctx);
    if (!h) {
      stop_all();
      return make_error(errc::spawn_failed,
                        fmt::format("actor '{}' ({}): {}", a.name, a.type, error_text(sys, h.error())));
    }
    self->monitor(*h);
    alive.insert(h->address());
    names[h->address()] = a.name;
    handles[a.name] = std::move(*h);
  }
  // 2. connect: every actor learns its peers before anyone starts
  links = spawn_links(sys, g, handles, [](const channel_spec&) { return true; });
  for (const auto& a : g.actors) {
    caf::error failure;
    self->request(handles.at(a.name), opts.connect_timeout, connect_atom::value, make_connect(g, a.name, handles, links))
      .receive([](caf::ok_atom) {}, [&](caf::error& e) { failure = std::move(e); });
    if (failure) {
      stop_all();
      return make_error(errc::actor_failed,
                        fmt::format("actor '{}' ({}) did not accept connect: {}", a.name, a.type,
                                    error_text(sys, failure)));
    }
  }
  // 3. start, 4. collect reports
  auto started = clock_type::now();
  auto last_done = started;
  for (const auto& a : g.actors)
    self->send(handles.at(a.name), start_atom::value);
  run_result res;
  res.first_step = g.checkpoint.resume_step;
  std::map<std::string, bool> done;
  std::string failure;
  run_checkpoints checkpoints{g};
  int signal = 0;
  while (done.size() < handles.size() && failure.empty() && signal == 0) {
    self->receive(
      [&](done_atom, run_summary& s) {
        last_done = clock_type::now();
        auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
        auto who = names.count(from) ? names[from] : s.actor;
        done[who] = true;
        res.summaries.push_back(std::move(s));
      },
      [&](checkpoint_atom, checkpoint_msg& m) {
        if (auto err = checkpoints.on_report(m, res); !err.empty())
          failure = std::move(err);
      },
      [&](failed_atom, failure_msg& f) {
        failure = fmt::format("actor '{}' failed: {}", f.actor, f.what);
      },
      [&](caf::down_msg& d) {
        alive.erase(d.source);
        auto who = names.count(d.source) ? names[d.source] : std::string{"?"};
        if (d.reason || !done.count(who))
          failure = fmt::format("actor '{}' exited before reporting done: {}", who,
                                d.reason ? error_text(sys, d.reason) : std::string{"normal exit"});
      },
      caf::after(std::chrono::milliseconds(100)) >> [] {});
    if (opts.timeout.count() > 0 && clock_type::now() - started > opts.timeout && failure.empty())
      failure = fmt::format("the run did not finish within {} s ({} of {} actors reported done)",
                            opts.timeout.count() / 1000.0, done.size(), handles.size());
    if (opts.interrupt)
      signal = opts.interrupt->load();
  }
  stop_all();
  if (signal != 0 && failure.empty())
    return checkpoints.interrupted(signal, done.size(), handles.size());
  if (!failure.empty())
    return make_error(errc::actor_failed, checkpoints.explain_failure(std::move(failure)));
  res.seconds = std::chrono::duration<double>(last_done - started).count();
  aggregate(res);
  return res;
}

run_checkpoints::run_checkpoints(const graph_spec& g) : dir_(g.checkpoint.dir_path) {
  if (g.checkpoint.every > 0 && !dir_.empty())
    tracker_.emplace(dir_, checkpoint_actors(g), g.checkpoint.keep);
}

std::string run_checkpoints::on_report(const checkpoint_msg& m, run_result& res) {
  if (!tracker_ || !tracker_->on_report(m.actor, m.step, m.file))
    return {};
  auto c = tracker_->commit(m.step);
  if (!c)
    return fmt::format("checkpoint after step {} failed: {}", m.step, error_message(c.error()));
  ++res.checkpoints;
  fmt::print("checkpoint step {} -> {} ({:.1f} MB, {:.0f} ms)\n", c->step, c->folder.string(),
             static_cast<double>(c->bytes) / 1e6, c->write_ms);
  std::fflush(stdout);
  return {};
}

std::string run_checkpoints::explain_failure(std::string why) const {
  if (tracker_ && tracker_->last_committed() >= 0)
    why += fmt::format("; the last complete checkpoint, {}, is intact (--resume {})",
                       (dir_ / checkpoint_folder_name(tracker_->last_committed())).string(), dir_.string());
  return why;
}

caf::error run_checkpoints::interrupted(int sig, std::size_t done, std::size_t actors) const {
  return make_error(errc::interrupted,
                    explain_failure(fmt::format("interrupted by {} before the run finished ({} of {} actors done)",
                                                sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal",
                                                done, actors)));
}

nlohmann::json summary_json(const run_result& r, const parameter_count& parameters) {
  auto num = [](std::optional<double> v) {
    return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  auto losses = nlohmann::json::array();
  for (double l : r.losses)
    losses.push_back(num(l));
  return {{"steps", r.steps},           {"tokens_per_s", num(r.tokens_per_s())}, {"ms_per_step", num(r.ms_per_step())},
          {"train_loss", num(r.train_loss)}, {"val_loss", num(r.val_loss)},    {"first_step", r.first_step},
          {"losses", losses},           {"parameters", to_json(parameters)}};
}

} // namespace troupe
