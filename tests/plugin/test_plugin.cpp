// A test plugin: one actor type, `plugin_echo`, that answers connect and start
// and reports done with the `steps:` it was given. Loaded by tests/plugin.
#include <caf/all.hpp>

#include "runtime/actor/messages.hpp"
#include "runtime/actor/registry.hpp"

namespace {

caf::behavior plugin_echo(caf::event_based_actor* self, troupe::run_summary summary, caf::actor runner) {
  return {
    [=](troupe::connect_atom, const troupe::connect_msg& m) {
      auto s = summary;
      s.tokens = static_cast<std::int64_t>(m.peers.size()); // lets the test see its channels arrived
      self->send(runner, troupe::done_atom::value, s);
      return caf::ok_atom::value;
    },
    [=](troupe::start_atom) {},
  };
}

caf::expected<caf::actor> spawn_plugin_echo(troupe::spawn_context& ctx) {
  troupe::run_summary s;
  s.actor = ctx.spec.name;
  auto steps = ctx.spec.params.find("steps");
  s.steps = steps == ctx.spec.params.end() ? 1 : steps->second.as<std::int64_t>();
  return ctx.system.spawn(plugin_echo, s, ctx.runner);
}

} // namespace

extern "C" void troupe_register_plugin() {
  troupe::actor_type t;
  t.spawn = spawn_plugin_echo;
  t.info.keys = {"steps"};
  t.info.check = [](const troupe::actor_spec& a, const troupe::graph_spec&, troupe::diagnostics& out) {
    auto steps = a.params.find("steps");
    if (steps != a.params.end() && steps->second.as<long long>(0) <= 0)
      out.push_back({a.pos, "steps", "plugin_echo needs a positive 'steps'"});
  };
  troupe::register_actor_type("plugin_echo", std::move(t), "test plugin: reports done at once");
}
