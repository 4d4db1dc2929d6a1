// The channel actor: the local stand-in for an actor on another node. Local
// actors send to it as to any peer; it moves each message over a connection.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "runtime/transport/transport.hpp"

namespace troupe {

/// Spawns the stand-in for actor `dest_index` (`dest_name`) of a remote node:
/// the data-plane messages it receives (remote_codec.hpp) are encoded and sent
/// over `conn`; tensor bytes are read from the handles, not copied. Any other
/// message is reported to `runner` as a failure naming the message. A null
/// `conn` (the node is down, #26) drops what it takes until reconnect_channel.
caf::actor spawn_channel(caf::actor_system& sys, std::string dest_name, std::uint16_t dest_index,
                         std::shared_ptr<net::connection> conn, caf::actor runner);

/// Points channel `channel` at a new connection to its actor's node (a lost
/// node that runs again, #26): the messages it takes after this one go there.
void reconnect_channel(const caf::actor& channel, std::shared_ptr<net::connection> conn);

} // namespace troupe
