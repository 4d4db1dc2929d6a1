// The `local_update:` section: the papers' defaults, what each algorithm keeps,
// and the rules between values that the graph file and `troupe sync` share.
#include <algorithm>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/graph/graph_loader.hpp"
#include "schedulers/sync/sync_policy.hpp"

namespace {

using namespace troupe;

[[maybe_unused]] const bool builtin_types = (register_builtin_actors(), true);

load_result load_with(std::string_view local_update, int replicas = 4) {
  load_options o;
  o.check_corpus = false;
  auto text = fmt::format(R"(model: {{layers: 2, d_model: 32, heads: 2, context: 16}}
data: {{batch: 2}}
train: {{steps: 10}}
data_parallel: {{replicas: {}}}
local_update: {}
)",
                          replicas, local_update);
  return load_graph_text(text, "g.yaml", o);
}

std::vector<local_update_problem> local_update_problems(const local_update_spec& l, int replicas) {
  return sched::local_update_problems(l, {.replicas = replicas});
}

bool has_problem(const local_update_spec& l, int replicas, std::string_view key) {
  for (const auto& p : local_update_problems(l, replicas))
    if (p.key == key)
      return true;
  return false;
}

} // namespace

TEST_CASE("local_update takes each paper's defaults when a key is absent") {
  auto d = load_with("{algorithm: diloco}");
  REQUIRE_MESSAGE(d.ok(), to_string(d.errors));
  const auto& l = d.graph->local_update;
  CHECK(l.present);
  CHECK(l.sync_every == 500);
  CHECK(l.outer.lr == 0.7);
  CHECK(l.outer.momentum == 0.9);
  CHECK(l.outer.nesterov);
  CHECK(l.quantize == "none");
  CHECK(load_with("{algorithm: noloco}").graph->local_update.sync_every == 50); // NoLoCo paper
  CHECK(load_with("{algorithm: streaming_diloco}").graph->local_update.sync_every == 100);
  // Every built-in method loads; SparseLoCo's outer settings are α = 1 and β = 0.95.
  for (auto algo : {"diloco", "streaming_diloco", "noloco", "desloc", "sparseloco"}) {
    auto n = load_with(fmt::format("{{algorithm: {}}}", algo));
    CHECK_MESSAGE(n.ok(), algo, ": ", to_string(n.errors));
  }
  auto s = load_with("{algorithm: sparseloco}");
  REQUIRE(s.ok());
  CHECK(s.graph->local_update.outer.lr == 1.0);
  CHECK(s.graph->local_update.outer.momentum == 0.95);
  auto n = load_with("{algorithm: noloco}"); // NoLoCo's paper: lr 0.7, momentum 0.5
  REQUIRE(n.ok());
  CHECK(n.graph->local_update.outer.momentum == 0.5);
  // DES-LOC averages on its periods: it has no outer optimizer to set.
  auto d2 = load_with("{algorithm: desloc, outer: {lr: 0.5}}");
  CHECK(to_string(d2.errors).find("local_update.outer: 'outer' is a setting of") != std::string::npos);
}

TEST_CASE("the issue's streaming example loads as written") {
  auto r = load_with("{algorithm: streaming_diloco, sync_every: 50, outer: {lr: 0.7, momentum: 0.9, nesterov: true}, "
                     "fragments: 2, delay: 5, alpha: 0.5, quantize: int8}");
  REQUIRE_MESSAGE(r.ok(), to_string(r.errors));
  const auto& l = r.graph->local_update;
  CHECK(l.options.at("fragments") == "2");
  CHECK(l.options.at("delay") == "5");
  CHECK(l.options.at("alpha") == "0.5");
  CHECK(l.quantize == "int8");
}

TEST_CASE("streaming rules: H divides by P, tau is below H/P, alpha is in [0, 1]") {
  local_update_spec l;
  l.algorithm = "streaming_diloco", l.options = {{"sync_every", "6"}, {"fragments", "2"}};
  REQUIRE(sched::settle_method_options(l));
  for (int delay = 0; delay < 3; ++delay) {
    l.options["delay"] = std::to_string(delay);
    CHECK(local_update_problems(l, 2).empty());
  }
  l.options["delay"] = "3";
  CHECK(has_problem(l, 2, "delay"));
  l.options["delay"] = "0", l.sync_every = 7;
  CHECK(has_problem(l, 2, "sync_every"));
  l.sync_every = 1;
  CHECK(has_problem(l, 2, "fragments")); // one fragment at a time: P ≤ H
  l.sync_every = 6;
  for (const char* a : {"0", "0.5", "1"}) {
    l.options["alpha"] = a;
    CHECK(local_update_problems(l, 2).empty());
  }
  for (const char* a : {"-0.1", "1.01"}) {
    l.options["alpha"] = a;
    CHECK(has_problem(l, 2, "alpha"));
  }
}

TEST_CASE("noloco's groups partition the replicas; the outer step needs lr > 0 and momentum below 1") {
  local_update_spec l;
  l.algorithm = "noloco", l.options = {{"group", "2"}};
  REQUIRE(sched::settle_method_options(l));
  CHECK(local_update_problems(l, 4).empty());
  CHECK(has_problem(l, 3, "group"));
  l.options["group"] = "8";
  CHECK(has_problem(l, 4, "group"));
  l.options["group"] = "2", l.outer.lr = 0;
  CHECK(has_problem(l, 4, "outer.lr"));
  l.outer.lr = 1, l.outer.momentum = 1;
  CHECK(has_problem(l, 4, "outer.momentum"));
}

TEST_CASE("a key of another algorithm is reported at its position") {
  auto r = load_with("{algorithm: diloco, density: 0.1}");
  CHECK_FALSE(r.ok());
  CHECK(to_string(r.errors).find("g.yaml:5:44: local_update.density: 'density' is a setting of sparseloco") !=
        std::string::npos);
}

TEST_CASE("local_update trains across processes and checkpoints, each sync actor writing its own part") {
  load_options o;
  o.check_corpus = false;
  const std::string text = R"(model: {layers: 2, d_model: 32, heads: 2, context: 16}
data: {batch: 2}
train: {steps: 10}
data_parallel: {replicas: 2}
local_update: {algorithm: diloco, sync_every: 4}
cluster: {nodes: 2}
)";
  auto across = load_graph_text(text, "g.yaml", o);
  CHECK(across.ok());
  auto saved = load_graph_text(text + "checkpoint: {dir: ck, every: 2}\n", "g.yaml", o);
  INFO(to_string(saved.errors));
  REQUIRE(saved.ok());
  auto parts = checkpoint_actors(*saved.graph);
  for (const char* sync : {"r0s0_sync", "r1s0_sync"})
    CHECK(std::find(parts.begin(), parts.end(), sync) != parts.end());
}

namespace {

bool has_channel(const graph_spec& g, std::string_view from, std::string_view to) {
  for (const auto& c : g.channels)
    if (c.from == from && c.to == to)
      return true;
  return false;
}

/// A method as a plugin adds one: its own key `every_other`, sync_every, and a
/// property the shorthand reads (routes across replicas) set from its key.
void register_test_method() {
  sched::method_settings settings{
    {sched::sync_every_option(7), int_setting_spec("every_other", "exchange every other round (a test key)", 1, 1, 10),
     choice_setting_spec("spread", "send microbatches on to other replicas", {"no", "yes"})},
    [](local_update_spec& l) { l.routes_across_replicas = sched::option_text(l, "spread") == "yes"; },
    nullptr};
  sched::register_sync_method(
    "test_periodic",
    {"a test's periodic average", [](const local_update_spec&) { return sched::param_fragments(1); },
     [](const local_update_spec& s) { return sched::periodic_schedule({s.sync_every}); }, nullptr, settings,
     // How its microbatches travel when they spread (the loader asks the method, not a name).
     [](const sched::routing_params& p) { return sched::make_routing("chain", p); }});
}

} // namespace

TEST_CASE("a key of one method is refused for another at its position, and its own method takes it") {
  auto r = load_with("{algorithm: noloco, group: 2, fragments: 2}");
  CHECK_FALSE(r.ok());
  CHECK(to_string(r.errors) ==
        "g.yaml:5:56: local_update.fragments: 'fragments' is a setting of streaming_diloco, not of algorithm "
        "'noloco'\n");
  auto ok = load_with("{algorithm: streaming_diloco, sync_every: 4, fragments: 2}");
  REQUIRE_MESSAGE(ok.ok(), to_string(ok.errors));
  CHECK(ok.graph->local_update.options.at("fragments") == "2");
  // Ill-typed and unknown keys name what was expected, where they are written.
  auto typed = load_with("{algorithm: streaming_diloco, fragments: two, fragmnets: 2}");
  CHECK(to_string(typed.errors).find("g.yaml:5:56: local_update.fragments: expected an integer") != std::string::npos);
  CHECK(to_string(typed.errors)
          .find("g.yaml:5:61: local_update.fragmnets: unknown key 'fragmnets' (did you mean "
                "'fragments'?") != std::string::npos);
  auto nested = load_with("{algorithm: desloc, periods: {params: 4, moments: 8}}");
  CHECK(to_string(nested.errors).find("local_update.periods.moments: unknown key 'moments'") != std::string::npos);
}

TEST_CASE("the method's defaults fill its options, and check's output loads again") {
  auto d = load_with("{algorithm: desloc, periods: {params: 4}}");
  REQUIRE_MESSAGE(d.ok(), to_string(d.errors));
  const auto& l = d.graph->local_update;
  CHECK(l.options.at("periods.momentum") == "12"); // K_u = 3·K_x
  CHECK(l.options.at("periods.variance") == "24");
  CHECK(l.options.at("quantize") == "none");
  CHECK_FALSE(l.options.contains("sync_every")); // DES-LOC's H is its parameter period
  auto again = load_graph_text(to_yaml(*d.graph), "again.yaml", [] {
    load_options o;
    o.check_corpus = false;
    return o;
  }());
  REQUIRE_MESSAGE(again.ok(), to_string(again.errors));
  CHECK(again.graph->local_update.options.at("periods.variance") == "24");
}

TEST_CASE("a method registered outside the loader has its own keys read and checked") {
  register_test_method();
  auto r = load_with("{algorithm: test_periodic, every_other: 3}");
  REQUIRE_MESSAGE(r.ok(), to_string(r.errors));
  CHECK(r.graph->local_update.options.at("every_other") == "3");
  CHECK(r.graph->local_update.sync_every == 7); // its own default
  auto high = load_with("{algorithm: test_periodic, every_other: 11}");
  CHECK(to_string(high.errors) == "g.yaml:5:55: local_update.every_other: must be at most 10, got 11\n");
  auto foreign = load_with("{algorithm: diloco, every_other: 3}");
  CHECK(to_string(foreign.errors) ==
        "g.yaml:5:48: local_update.every_other: 'every_other' is a setting of test_periodic, not of algorithm "
        "'diloco'\n");
  // A key no method has is refused at its position, with the chosen method's keys listed.
  auto unknown = load_with("{algorithm: test_periodic, every: 3}");
  CHECK(to_string(unknown.errors) == "g.yaml:5:42: local_update.every: unknown key 'every' (known: algorithm, "
                                     "replica_groups, sync_every, every_other, spread)\n");
  auto theirs = load_with("{algorithm: test_periodic, outer: {lr: 0.5}}");
  CHECK(to_string(theirs.errors)
          .find("'outer' is a setting of diloco, streaming_diloco, noloco, sparseloco, not "
                "of algorithm 'test_periodic'") != std::string::npos);
}

TEST_CASE("a method's registered property, not its name, gives stages channels to the other replicas") {
  register_test_method();
  auto text = [](std::string_view lu) {
    return fmt::format("model: {{layers: 2, d_model: 32, heads: 2, context: 16}}\ndata: {{batch: 2}}\n"
                       "train: {{steps: 10}}\npipeline: {{stages: 2}}\ndata_parallel: {{replicas: 2}}\n"
                       "local_update: {}\n",
                       lu);
  };
  load_options o;
  o.check_corpus = false;
  for (auto [lu, across] :
       {std::pair{"{algorithm: test_periodic, spread: yes}", true},
        std::pair{"{algorithm: test_periodic, spread: no}", false},
        std::pair{"{algorithm: noloco, route: random}", true}, std::pair{"{algorithm: noloco, route: chain}", false}}) {
    auto r = load_graph_text(text(lu), "g.yaml", o);
    REQUIRE_MESSAGE(r.ok(), lu, ": ", to_string(r.errors));
    CHECK_MESSAGE(r.graph->local_update.routes_across_replicas == across, lu);
    CHECK_MESSAGE(has_channel(*r.graph, "r0s0", "r1s1") == across, lu);
  }
}
