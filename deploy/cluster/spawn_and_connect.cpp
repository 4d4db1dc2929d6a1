// Spawning and connecting one process's share of a graph
// (deploy/cluster/spawn_and_connect.hpp), for `troupe run` and the node agent alike.
#include "deploy/cluster/spawn_and_connect.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/link.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/actor/registry.hpp"

namespace troupe {

namespace {

/// The connect message for actor `self`: its channels' peers and the whole
/// directory, with `handles` (by actor name) standing for each actor — local
/// actors or, across processes, the channel actors that reach them — and a
/// link from `links` where the channel emulates one.
connect_msg make_connect(const graph_spec& g, const std::string& self, const std::map<std::string, caf::actor>& handles,
                         const link_map& links) {
  connect_msg m;
  m.self = self;
  auto type_of = [&](const std::string& n) { return g.find_actor(n)->type; };
  auto to = [&](const std::string& n) { // how `self` reaches `n`: through a link, if one is emulated
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

/// A link actor for each direction of every channel with `bandwidth:` or
/// `latency:` whose ends are both here.
link_map spawn_links(caf::actor_system& sys, const graph_spec& g, const std::map<std::string, caf::actor>& handles,
                     const here_fn& here) {
  link_map links;
  for (const auto& c : g.channels)
    if ((c.bandwidth > 0 || c.latency > 0) && here(*g.find_actor(c.from)) && here(*g.find_actor(c.to))) {
      links[{c.from, c.to}] = spawn_link(sys, handles.at(c.to), c.bandwidth, c.latency);
      links[{c.to, c.from}] = spawn_link(sys, handles.at(c.from), c.bandwidth, c.latency);
    }
  return links;
}

} // namespace

void graph_actors::start(caf::scoped_actor& self) const {
  for (const auto& h : by_index)
    if (h)
      self->send(h, start_atom::value);
}

void graph_actors::stop(caf::scoped_actor& self, std::chrono::milliseconds patience) {
  for (auto& [ends, l] : links)
    self->send_exit(l, caf::exit_reason::user_shutdown);
  for (auto& [name, h] : handles)
    self->send_exit(h, caf::exit_reason::user_shutdown);
  bool waiting = true;
  while (waiting && !alive.empty())
    self->receive([&](caf::down_msg& d) { alive.erase(d.source); }, caf::after(patience) >> [&] { waiting = false; });
}

caf::error spawn_and_connect(caf::scoped_actor& self, const graph_spec& g, const here_fn& here, const remote_fn& remote,
                             std::chrono::milliseconds connect_timeout, graph_actors& out) {
  auto& sys = self->system();
  auto runner = caf::actor_cast<caf::actor>(self);
  const auto& actors = g.actors;
  out.by_index.assign(actors.size(), caf::actor{});
  // 1. spawn this process's actors
  for (std::size_t i = 0; i < actors.size(); ++i) {
    const auto& a = actors[i];
    if (!here(a))
      continue;
    auto type = actor_registry().find(a.type);
    if (!type)
      return make_error(errc::unknown_actor_type,
                        fmt::format("{}: actor '{}': type '{}' has no implementation in this build (registered: {})",
                                    to_string(a.pos), a.name, a.type, fmt::join(actor_registry().names(), ", ")));
    spawn_context ctx{sys, a, g, runner};
    auto h = type->factory.spawn(ctx);
    if (!h)
      return make_error(errc::spawn_failed,
                        fmt::format("actor '{}' ({}): {}", a.name, a.type, error_message(h.error())));
    self->monitor(*h);
    out.alive.insert(h->address());
    out.names[h->address()] = a.name;
    out.handles[a.name] = *h;
    out.by_index[i] = std::move(*h);
  }
  // ... and a stand-in for each of the others
  for (std::size_t i = 0; i < actors.size(); ++i) {
    if (here(actors[i]))
      continue;
    if (!remote)
      return make_error(errc::invalid_argument,
                        fmt::format("actor '{}' runs in no process (no stand-in for it)", actors[i].name));
    auto h = remote(i);
    if (!h)
      return std::move(h.error());
    out.handles[actors[i].name] = std::move(*h);
  }
  out.links = spawn_links(sys, g, out.handles, here);
  // 2. connect: every actor learns its peers before anyone starts
  for (std::size_t i = 0; i < actors.size(); ++i) {
    const auto& a = actors[i];
    if (!out.by_index[i])
      continue;
    caf::error failure;
    self
      ->request(out.by_index[i], connect_timeout, connect_atom::value, make_connect(g, a.name, out.handles, out.links))
      .receive([](caf::ok_atom) {}, [&](caf::error& e) { failure = std::move(e); });
    if (failure)
      return make_error(errc::actor_failed, fmt::format("actor '{}' ({}) did not accept connect: {}", a.name, a.type,
                                                        error_message(failure)));
  }
  return {};
}

} // namespace troupe
