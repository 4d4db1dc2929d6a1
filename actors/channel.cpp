// The channel actor (actors/channel.hpp): encodes data-plane messages for a
// remote actor and hands them to the connection to its node.
#include "actors/channel.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/stage/pipeline_messages.hpp"
#include "actors/remote_codec.hpp"
#include "runtime/trace/hang_watch.hpp"
#include "runtime/trace/trace.hpp"

using connection_ptr = std::shared_ptr<troupe::net::connection>;
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(connection_ptr)

namespace troupe {

namespace {

using reconnect_atom = caf::atom_constant<caf::atom("reconnect")>;

struct channel_state {
  std::shared_ptr<net::connection> conn;
  std::uint16_t trace_id = 0;
  static inline const char* name = "channel";
};

using channel_actor = caf::stateful_actor<channel_state>;

caf::behavior channel(channel_actor* self, std::string dest_name, std::uint16_t dest,
                      std::shared_ptr<net::connection> conn, caf::actor runner) {
  self->state.conn = std::move(conn);
  self->state.trace_id = trace_recorder::global().register_actor("to " + dest_name, "channel");
  auto ship = [self](net::frame f) {
    std::int64_t bytes = 0;
    for (const auto& b : f.blobs)
      bytes += static_cast<std::int64_t>(b.nbytes());
    if (!self->state.conn)
      return; // its node is down (a joiner's plan, #26): what it would have taken is lost with it
    handler_scope busy(self->state.trace_id, "send"); // a send that blocks on the transport is a hang too
    scoped_span s(self->state.trace_id, span_kind::send, -1, -1);
    s.get().bytes = static_cast<std::size_t>(bytes);
    self->state.conn->send(std::move(f));
  };
  self->set_default_handler([=](caf::scheduled_actor*, caf::message_view& m) -> caf::result<caf::message> {
    self->send(
      runner, failed_atom::value,
      failure_msg{"channel to " + dest_name, fmt::format("message {} cannot cross processes (no wire encoding for it)",
                                                         caf::to_string(m.content()))});
    return caf::none;
  });
  return remote::encoders(dest, ship, [self](reconnect_atom, const connection_ptr& c) { self->state.conn = c; });
}

} // namespace

void reconnect_channel(const caf::actor& channel, std::shared_ptr<net::connection> conn) {
  caf::anon_send(channel, reconnect_atom::value, std::move(conn));
}

caf::actor spawn_channel(caf::actor_system& sys, std::string dest_name, std::uint16_t dest_index,
                         std::shared_ptr<net::connection> conn, caf::actor runner) {
  return sys.spawn(channel, std::move(dest_name), dest_index, std::move(conn), std::move(runner));
}

} // namespace troupe
