// Steps 1 and 2 of the run protocol (runtime/actor/messages.hpp) for the actors of
// one process: `troupe run` starts every actor of the graph, the node agent
// those of its node, with stand-ins for the others. One routine serves both.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/scoped_actor.hpp>

#include "runtime/graph/graph_spec.hpp"

namespace troupe {

/// (sender, receiver) to the link actor (actors/link.hpp) that emulates the
/// `bandwidth:` and `latency:` of the channel between them.
using link_map = std::map<std::pair<std::string, std::string>, caf::actor>;

/// What spawn_and_connect started in this process. The caller stops it.
struct graph_actors {
  std::map<std::string, caf::actor> handles;    ///< by name: this process's actors and the stand-ins for the others
  std::vector<caf::actor> by_index;             ///< this process's actors by graph index; null for the others
  std::map<caf::actor_addr, std::string> names; ///< this process's actors (monitored), by address
  std::set<caf::actor_addr> alive;              ///< those not yet seen down; the caller erases on down_msg
  link_map links;                               ///< emulated links between this process's actors

  /// Sends `start_atom` to each of this process's actors, in graph order.
  void start(caf::scoped_actor& self) const;
  /// Sends every actor, stand-in and link an exit (user_shutdown) and waits
  /// until each of this process's actors is down, or `patience` passed without
  /// one going, so nothing they own outlives the caller.
  void stop(caf::scoped_actor& self, std::chrono::milliseconds patience);
};

/// Whether this process runs an actor.
using here_fn = std::function<bool(const actor_spec&)>;
/// The stand-in handle (a channel actor, actors/channel.hpp) for the actor at a
/// graph index that runs elsewhere, or why there is none.
using remote_fn = std::function<caf::expected<caf::actor>(std::size_t)>;

/// Spawns the actors of `g` for which `here` is true through their registered
/// factories, with `self` as their runner, monitored; asks `remote` for a
/// stand-in for each other actor (`remote` may be empty when every actor is
/// here); spawns links for the channels with both ends here (across processes
/// the connections emulate them); then sends each local actor its connect_msg
/// and waits up to `connect_timeout` for its reply. Fills `out` as it goes, so
/// that after an error (errc::unknown_actor_type, errc::spawn_failed,
/// errc::actor_failed, or remote's) the caller can stop what was started.
caf::error spawn_and_connect(caf::scoped_actor& self, const graph_spec& g, const here_fn& here, const remote_fn& remote,
                             std::chrono::milliseconds connect_timeout, graph_actors& out);

} // namespace troupe
