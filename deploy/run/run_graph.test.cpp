// Tests of running a graph in one process: spawn from the registry, connect,
// start, collect done reports, and turn failures and crashes into errors.
#include "deploy/run/run_graph.hpp"

#include <map>

#include <doctest/doctest.h>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "actors/skippipe_plan.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/actor/registry.hpp"
#include "schedulers/planners/path_planner.hpp"
#include "schedulers/routing/routing_policy.hpp"

namespace {

using namespace troupe;

int int_param(const actor_spec& a, const char* key, int fallback) {
  auto i = a.params.find(key);
  return i == a.params.end() ? fallback : i->second.as<int>();
}

/// Sends `count` activations holding 1, 2, ..., count to every out peer, then reports done.
caf::behavior ticker(caf::event_based_actor* self, std::string name, int count, caf::actor runner) {
  auto outs = std::make_shared<std::vector<caf::actor>>();
  return {
    [=](connect_atom, const connect_msg& m) {
      for (const auto& p : m.peers)
        if (p.dir == channel_dir::out)
          outs->push_back(p.handle);
      return caf::ok_atom::value;
    },
    [=](start_atom) {
      for (int i = 1; i <= count; ++i) {
        auto t = tensor_handle::empty({1});
        *t.data<float>() = static_cast<float>(i);
        for (const auto& o : *outs)
          self->send(o, forward_atom::value, activation_msg{i, 0, 0, t, {}});
      }
      run_summary s;
      s.actor = name;
      self->send(runner, done_atom::value, s);
    },
  };
}

/// Sums the activations it receives; reports done (loss = the sum) after `expect` of them.
caf::behavior counter(caf::event_based_actor* self, std::string name, int expect, caf::actor runner) {
  auto sum = std::make_shared<double>(0);
  auto seen = std::make_shared<int>(0);
  return {
    [=](connect_atom, const connect_msg&) { return caf::ok_atom::value; },
    [=](start_atom) {},
    [=](forward_atom, const activation_msg& m) {
      *sum += *m.activation.data<float>();
      if (++*seen == expect) {
        run_summary s;
        s.actor = name;
        s.steps = expect;
        s.tokens = expect * 4;
        s.train_loss = *sum;
        self->send(runner, done_atom::value, s);
      }
    },
  };
}

caf::behavior failer(caf::event_based_actor* self, std::string name, caf::actor runner) {
  return {
    [=](connect_atom, const connect_msg&) { return caf::ok_atom::value; },
    [=](start_atom) {
      self->send(runner, failed_atom::value, failure_msg{name, "the disk is on fire"});
    },
  };
}

caf::behavior crasher(caf::event_based_actor*, std::string) {
  return {
    [=](connect_atom, const connect_msg&) { return caf::ok_atom::value; },
    [=](start_atom) { throw std::runtime_error("boom"); },
  };
}

void register_test_types() {
  static const bool once = [] {
    register_actor_type("test_ticker", {[](spawn_context& c) -> caf::expected<caf::actor> {
                                          return c.system.spawn(ticker, c.spec.name, int_param(c.spec, "count", 1),
                                                                c.runner);
                                        },
                                        {{"count"}, {}, {}}});
    register_actor_type("test_counter", {[](spawn_context& c) -> caf::expected<caf::actor> {
                                           return c.system.spawn(counter, c.spec.name, int_param(c.spec, "expect", 1),
                                                                 c.runner);
                                         },
                                         {{"expect"}, {}, {}}});
    register_actor_type("test_failer", {[](spawn_context& c) -> caf::expected<caf::actor> {
                                          return c.system.spawn(failer, c.spec.name, c.runner);
                                        },
                                        {}});
    register_actor_type("test_crasher",
                        {[](spawn_context& c) -> caf::expected<caf::actor> {
                           return c.system.spawn(crasher,
                                                 c.spec.name); // (no-argument function actors trip UBSan in CAF 0.17)
                         },
                         {}});
    register_actor_type("test_unspawnable", {[](spawn_context& c) -> caf::expected<caf::actor> {
                                               return make_error(errc::spawn_failed, "no GPU for " + c.spec.name);
                                             },
                                             {}});
    return true;
  }();
  (void)once;
}

graph_spec graph_of(const std::string& actors_and_channels) {
  register_test_types();
  load_options o;
  o.check_corpus = false;
  o.vocabulary = [] { return make_vocabulary(); };
  auto r = load_graph_text("model: {layers: 1, d_model: 8, heads: 2, context: 4}\ndata: {batch: 1}\n"
                           "train: {steps: 1}\n" +
                             actors_and_channels,
                           "run.yaml", o);
  REQUIRE_MESSAGE(r.ok(), to_string(r.errors));
  return *r.graph;
}

} // namespace

TEST_CASE("a graph runs to completion when every actor reports done") {
  auto g = graph_of("actors:\n  - {name: a, type: test_ticker, count: 100}\n"
                    "  - {name: b, type: test_counter, expect: 100}\n  - {name: c, type: test_counter, expect: 100}\n"
                    "channels:\n  - {from: a, to: b}\n  - {from: a, to: c}\n");
  troupe_config cfg;
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, g);
  REQUIRE_MESSAGE(r, error_message(r.error()));
  CHECK(r->summaries.size() == 3);
  CHECK(r->steps == 100);
  CHECK(r->tokens == 800);
  REQUIRE(r->train_loss);
  CHECK(*r->train_loss == doctest::Approx(5050.0)); // every payload arrived intact
  CHECK_FALSE(r->val_loss);
  auto json = summary_json(*r, count_parameters(g));
  CHECK(json.at("steps") == 100);
  CHECK(json.at("val_loss").is_null());
  CHECK(json.at("parameters").at("total") == 0); // no actor here holds layers
}

TEST_CASE("an actor's failure report fails the run with its reason") {
  auto g = graph_of("actors:\n  - {name: fine, type: test_counter}\n  - {name: bad, type: test_failer}\n");
  troupe_config cfg;
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, g);
  REQUIRE_FALSE(r);
  CHECK(error_message(r.error()) == "actor 'bad' (node 0) failed: the disk is on fire");
}

TEST_CASE("an actor that crashes fails the run instead of hanging it") {
  auto g = graph_of("actors:\n  - {name: fine, type: test_counter}\n  - {name: boom, type: test_crasher}\n");
  troupe_config cfg;
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, g);
  REQUIRE_FALSE(r);
  CHECK(error_message(r.error()).starts_with("actor 'boom' (node 0) exited before reporting done"));
}

TEST_CASE("a supervision message names the actor, its node, replica, position and step") {
  register_builtin_actors(); // the `pipeline:` shorthand's stages
  load_options o;
  o.check_corpus = false;
  o.vocabulary = [] { return make_vocabulary(); };
  auto r = load_graph_text("model: {layers: 4, d_model: 8, heads: 2, context: 4}\ndata: {batch: 1}\n"
                           "train: {steps: 10}\npipeline: {stages: 2, microbatches: 2}\n"
                           "data_parallel: {replicas: 2}\n",
                           "run.yaml", o);
  REQUIRE_MESSAGE(r.ok(), to_string(r.errors));
  const auto& g = *r.graph;
  const auto* a = g.find_actor("r1s1");
  REQUIRE(a);
  CHECK(describe_actor(g, "r1s1", 5) ==
        fmt::format("actor 'r1s1' (node {}, replica 1, position 1, in step 6)", g.node_of(*a)));
  CHECK(describe_actor(g, "r0s0") ==
        fmt::format("actor 'r0s0' (node {}, replica 0, position 0)", g.node_of(*g.find_actor("r0s0"))));
  CHECK(describe_actor(g, "nobody", 2) == "actor 'nobody' (in step 3)");
  // A stage's helper names the stage it serves, with its replica and position.
  CHECK(describe_actor(g, "r1s0_ar", 4) == fmt::format("actor 'r1s0_ar' (node {}, serving r1s0: replica 1, position 0, "
                                                       "in step 5)",
                                                       g.node_of(*g.find_actor("r1s0_ar"))));
}

TEST_CASE("a factory error stops the run before anything starts") {
  auto g = graph_of("actors:\n  - {name: fine, type: test_counter}\n  - {name: gpu, type: test_unspawnable}\n");
  troupe_config cfg;
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, g);
  REQUIRE_FALSE(r);
  CHECK(error_message(r.error()) == "actor 'gpu' (test_unspawnable): no GPU for gpu");
}

TEST_CASE("a run that never finishes ends at its timeout") {
  auto g = graph_of("actors:\n  - {name: waits, type: test_counter, expect: 5}\n");
  troupe_config cfg;
  caf::actor_system sys{cfg};
  run_options o;
  o.timeout = std::chrono::milliseconds(300);
  auto r = run_graph(sys, g, o);
  REQUIRE_FALSE(r);
  CHECK(error_message(r.error()) == "the run did not finish within 0.3 s (0 of 1 actors reported done)");
}

namespace {

/// `text` as g.yaml, checked against what troupe registers (corpus not read).
load_result load_with_troupe(const std::string& text) {
  load_options o;
  o.check_corpus = false;
  o.vocabulary = troupe_vocabulary;
  return load_graph_text(text, "g.yaml", o);
}

} // namespace

TEST_CASE("a routing policy's settings are the ones it registered, refused elsewhere at their positions") {
  sched::register_routing("test_spread", "the plain chain, with a setting of its own",
                          [](const sched::routing_params& p) { return sched::make_routing("chain", p); },
                          {int_setting_spec("spread", "how far microbatches spread (a test key)", 1, 1, 4)});
  auto load = [](std::string_view routing) {
    return load_with_troupe(fmt::format("model: {{layers: 2, d_model: 32, heads: 2, context: 16}}\ndata: {{batch: 2}}\n"
                                        "train: {{steps: 10}}\npipeline: {{stages: 2, routing: {}}}\n",
                                        routing));
  };
  auto ok = load("{policy: test_spread, spread: 3}");
  REQUIRE_MESSAGE(ok.ok(), to_string(ok.errors));
  CHECK(ok.graph->pipeline.routing_options.at("spread") == "3");
  CHECK(load("{policy: test_spread}").graph->pipeline.routing_options.at("spread") == "1"); // its default
  CHECK(to_string(load("{policy: test_spread, spread: 9}").errors) ==
        "g.yaml:4:62: pipeline.routing.spread: must be at most 4, got 9\n");
  CHECK(to_string(load("{policy: chain, spread: 3}").errors) ==
        "g.yaml:4:48: pipeline.routing.spread: unknown key 'spread' (known: policy, paths)\n");
}

TEST_CASE("a planner's settings are the ones it registered, and skip.planner runs the registered planner") {
  std::map<std::string, std::string> seen;
  sched::register_path_planner("test_stride",
                               {"DT-FM's fixed chains, with a setting of its own",
                                true,
                                {int_setting_spec("stride", "how far apart chains start (a test key)", 1, 1, 4)},
                                [&seen](const sched::planner_input& in) -> sched::expected<sched::path_plan> {
                                  seen = in.options;
                                  sched::path_plan out;
                                  out.paths = sched::plan_full(in.where, in.agents);
                                  out.planned_s = sched::simulate_iteration(in.problem, in.agents, out.paths).time;
                                  return out;
                                }});
  auto load = [](std::string_view skip) {
    return load_with_troupe(fmt::format("model: {{layers: 6, d_model: 32, heads: 2, context: 16}}\ndata: {{batch: 4}}\n"
                                        "train: {{steps: 10}}\npipeline: {{stages: 3, microbatches: 2}}\n"
                                        "network: {{preset: geo12, nodes: 7}}\nskip: {}\n",
                                        skip));
  };
  auto ok = load("{path_length: 2, planner: test_stride, stride: 2}");
  REQUIRE_MESSAGE(ok.ok(), to_string(ok.errors));
  CHECK(ok.graph->skip.planner_options.at("stride") == "2");
  CHECK(skippipe_path_stages(*ok.graph) == 3); // its paths visit every stage, whatever path_length says
  auto plan = plan_skippipe_graph(*ok.graph, false, {});
  REQUIRE(plan);
  CHECK(seen.at("stride") == "2");
  CHECK(plan->paths.size() == plan->agents.size());
  CHECK(plan->planned > 0);
  CHECK(load("{path_length: 2, planner: test_stride}").graph->skip.planner_options.at("stride") == "1");
  CHECK(to_string(load("{path_length: 2, planner: test_stride, stride: 9}").errors) ==
        "g.yaml:6:54: skip.stride: must be at most 4, got 9\n");
  auto foreign = to_string(load("{path_length: 2, planner: skippipe, stride: 2}").errors);
  CHECK(foreign.find("g.yaml:6:43: skip.stride: unknown key 'stride' (known: path_length, memory") !=
        std::string::npos);
  auto unknown = to_string(load("{path_length: 2, planner: test_strid}").errors);
  CHECK(unknown.find("skip.planner: unknown planner 'test_strid' (did you mean 'test_stride'? known: skippipe, full, "
                     "chains, random, test_stride)") != std::string::npos);
}
