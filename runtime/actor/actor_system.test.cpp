// Tests of the actor-system bootstrap: scheduler settings, registered message
// types, troupe errors, and tensor handles crossing actors without copies.
#include "runtime/actor/actor_system.hpp"

#include <doctest/doctest.h>

#include <cstdlib>

#include <caf/all.hpp>

#include "runtime/actor/errors.hpp"
#include "runtime/actor/messages.hpp"

using namespace troupe;

TEST_CASE("the config uses the sharing scheduler and one thread per core by default") {
  troupe_config cfg{runtime_options{}};
  CHECK(cfg.options().policy == "sharing");
  CHECK(cfg.options().threads >= 1);
  CHECK(caf::get_or(cfg, "scheduler.policy", caf::atom("x")) == caf::atom("sharing"));
  CHECK(caf::get_or(cfg, "scheduler.max-threads", std::size_t{0}) == cfg.options().threads);
  troupe_config three{runtime_options{3, "stealing", 50}};
  CHECK(caf::get_or(three, "scheduler.max-threads", std::size_t{0}) == 3);
  CHECK(caf::get_or(three, "scheduler.policy", caf::atom("x")) == caf::atom("stealing"));
}

TEST_CASE("the environment picks threads and policy, ignoring nonsense") {
  setenv("TROUPE_THREADS", "5", 1);
  setenv("TROUPE_SCHEDULER", "stealing", 1);
  auto o = runtime_options_from_env();
  CHECK(o.threads == 5);
  CHECK(o.policy == "stealing");
  setenv("TROUPE_THREADS", "lots", 1);
  setenv("TROUPE_SCHEDULER", "random", 1);
  o = runtime_options_from_env();
  CHECK(o.threads == 0);
  CHECK(o.policy == "sharing");
  unsetenv("TROUPE_THREADS");
  unsetenv("TROUPE_SCHEDULER");
}

TEST_CASE("every payload type is registered under its troupe name") {
  troupe_config cfg;
  for (const char* name : {"troupe.activation_msg", "troupe.gradient_msg", "troupe.batch_msg", "troupe.credit_msg",
                           "troupe.peer", "troupe.connect_msg", "troupe.run_summary", "troupe.failure_msg",
                           "troupe.checkpoint_msg", "troupe.attention_task_msg", "troupe.attention_result_msg"})
    CHECK_MESSAGE(cfg.value_factories_by_name.count(name) == 1, name);
  // Message types declared for later work are not registered until something sends them.
  for (const char* name : {"troupe.grads_msg", "troupe.params_msg", "troupe.sync_msg", "troupe.trace_batch_msg"})
    CHECK_MESSAGE(cfg.value_factories_by_name.count(name) == 0, name);
}

TEST_CASE("troupe errors carry their text and render through the actor system") {
  auto e = make_error(errc::spawn_failed, "actor 's1': no memory");
  CHECK(e.category() == troupe_error_category);
  CHECK(error_message(e) == "actor 's1': no memory");
  troupe_config cfg;
  caf::actor_system sys{cfg};
  CHECK(sys.render(e).find("spawn_failed: actor 's1': no memory") != std::string::npos);
}

TEST_CASE("a tensor handle sent to another actor shares its bytes instead of copying them") {
  troupe_config cfg{runtime_options{2, "sharing", 1000}};
  caf::actor_system sys{cfg};
  auto t = tensor_handle::zeros({4, 8});
  t.data<float>()[3] = 42.0f;
  // (CAF 0.17 trips UBSan when a function actor takes no arguments: pass one.)
  auto echo = sys.spawn(
    [](caf::event_based_actor*, int) -> caf::behavior {
      return {[](forward_atom, const activation_msg& m) {
        m.activation.data<float>()[5] = 7.0f; // the sender sees this write: same bytes
        return gradient_msg{m.step, m.microbatch, m.hop, m.activation, m.route};
      }};
    },
    0);
  caf::scoped_actor self{sys};
  self->request(echo, caf::infinite, forward_atom::value, activation_msg{3, 1, 0, t, route_t{{2, 0}, {3, 1}}})
    .receive(
      [&](const gradient_msg& g) {
        CHECK(g.step == 3);
        CHECK(g.route == route_t{{2, 0}, {3, 1}});
        CHECK(g.gradient.same_bytes(t));
        CHECK(g.gradient.data<float>()[3] == 42.0f);
      },
      [&](const caf::error& e) { FAIL(caf::to_string(e)); });
  CHECK(t.data<float>()[5] == 7.0f);
  self->send_exit(echo, caf::exit_reason::user_shutdown);
}
