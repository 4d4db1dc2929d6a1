// The link actor: an emulated network link between two actors of one
// process, for the `bandwidth:` and `latency:` of a channel whose ends share a
// node (across nodes the transport enforces them on the bytes it sends).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

namespace troupe {

/// Spawns a link to `dest`: each message it receives arrives at `dest` after
/// waiting for the link to be free, its tensor bytes / `bytes_per_s` (0 =
/// unlimited) and `latency_s`. Order is kept.
caf::actor spawn_link(caf::actor_system& sys, caf::actor dest, double bytes_per_s, double latency_s);

} // namespace troupe
