// The attention_server actor (DistCA's separate attention servers, #15): runs the
// core-attention shards stages send it, keeping each forward's inputs until its
// backward, and answers the stage that sent them.
#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "actors/stage/stage_attention.hpp"
#include "runtime/trace/hang_watch.hpp"
#include "runtime/trace/trace.hpp"

namespace troupe {

namespace {

struct attention_server_actor_state {
  attention_server_state server;
  std::vector<caf::actor> actors; ///< every actor of the graph, by index (answers go to key.from)
  bool failed = false;
  static inline const char* name = "attention_server";
};

using server_actor = caf::stateful_actor<attention_server_actor_state>;

caf::behavior attention_server(server_actor* self, std::string name, caf::actor runner, std::uint16_t id) {
  auto fail = [self, name, runner](const std::string& what) {
    if (!std::exchange(self->state.failed, true))
      self->send(runner, failed_atom::value, failure_msg{name, what});
  };
  return {
    [=](connect_atom, const connect_msg& m) -> caf::result<caf::ok_atom> {
      for (const auto& p : m.directory)
        self->state.actors.push_back(p.handle);
      return caf::ok_atom::value;
    },
    [=](start_atom) {
      run_summary s; // done at once: it computes what it is sent for as long as the run lasts
      s.actor = name;
      self->send(runner, done_atom::value, std::move(s));
    },
    [=](attention_atom, const attention_task_msg& m) {
      auto& st = self->state;
      trace_recorder::global().message_received(id);
      if (st.failed)
        return;
      handler_scope busy(id, "attention task");
      try {
        attention_result_msg r;
        {
          scoped_span s(id, span_kind::attention, static_cast<std::int32_t>(m.key.step), m.key.microbatch);
          r = st.server.serve(m);
          s.get().bytes =
            r.out.defined() ? r.out.nbytes() : 0; // a forward's answer: its queries' outputs (0 for a backward)
        }
        if (m.key.from < 0 || static_cast<std::size_t>(m.key.from) >= st.actors.size())
          throw std::runtime_error(fmt::format("a task from actor {}, which the graph does not have", m.key.from));
        self->send(st.actors[static_cast<std::size_t>(m.key.from)], attention_atom::value, std::move(r));
      } catch (const std::exception& e) {
        fail(e.what());
      }
    },
  };
}

} // namespace

actor_type_info attention_server_info() {
  actor_type_info info;
  info.role.placement = actor_placement::by_position;
  return info;
}

caf::expected<caf::actor> spawn_attention_server(spawn_context& ctx) {
  auto id = trace_recorder::global().register_actor(ctx.spec.name, "attention_server");
  return caf::actor{ctx.system.spawn(attention_server, ctx.spec.name, ctx.runner, id)};
}

} // namespace troupe
