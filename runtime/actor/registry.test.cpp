// Tests of the named registries and the "did you mean" suggestions.
#include "runtime/actor/registry.hpp"

#include <doctest/doctest.h>

using namespace troupe;

TEST_CASE("edit distance counts insertions, deletions and substitutions") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("gpipe", "gpipe") == 0);
  CHECK(edit_distance("1fb1", "1f1b") == 2);
  CHECK(edit_distance("pipline_stage", "pipeline_stage") == 1);
  CHECK(edit_distance("abc", "") == 3);
}

TEST_CASE("the nearest name is offered only when it is a plausible typo") {
  std::vector<std::string> known{"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "table"};
  CHECK(nearest_name("1fb1", known) == "1f1b");
  CHECK(nearest_name("gpip", known) == "gpipe");
  CHECK(nearest_name("interleaved", known) == "interleaved_1f1b");
  CHECK(nearest_name("quantum", known) == std::nullopt);
  CHECK(nearest_name("gpipe", known) == std::nullopt); // an exact name needs no suggestion
  CHECK(nearest_name("x", {}) == std::nullopt);
}

TEST_CASE("a named registry adds, finds, lists and refuses duplicates") {
  named_registry<int> r;
  CHECK(r.add("one", 1, "the first"));
  CHECK(r.add("two", 2));
  CHECK_FALSE(r.add("one", 11));
  REQUIRE(r.find("one"));
  CHECK(r.find("one")->factory == 1);
  CHECK(r.find("one")->summary == "the first");
  CHECK_FALSE(r.find("three"));
  CHECK(r.names() == std::vector<std::string>{"one", "two"});
  CHECK(r.suggest("twoo") == "two");
  r.set("one", 12);
  CHECK(r.find("one")->factory == 12);
  CHECK(r.remove("one"));
  CHECK_FALSE(r.contains("one"));
}

TEST_CASE("registered actor types join the loader's vocabulary with their keys") {
  actor_type t;
  t.spawn = [](spawn_context&) -> caf::expected<caf::actor> { return caf::actor{}; };
  t.info.keys = {"rate"};
  REQUIRE(register_actor_type("registry_test_type", t, "for this test"));
  CHECK_FALSE(register_actor_type("registry_test_type", t));
  auto v = make_vocabulary({"my_schedule", "gpipe"});
  REQUIRE(v.actor_types.count("registry_test_type") == 1);
  CHECK(v.actor_types["registry_test_type"].keys == std::vector<std::string>{"rate"});
  CHECK(v.schedules == std::vector<std::string>{"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zbv", "v_half", "v_min",
                                                "dualpipev", "table", "my_schedule"});
  actor_registry().remove("registry_test_type");
}

TEST_CASE("an actor type's role and a section's expander reach the loader through the vocabulary") {
  actor_type t;
  t.spawn = [](spawn_context&) -> caf::expected<caf::actor> { return caf::actor{}; };
  t.info.role.holds_layers = true;
  t.info.role.placement = actor_placement::by_position;
  REQUIRE(register_actor_type("registry_role_type", t));
  REQUIRE(register_section_expander("pipeline", {[](section_expansion& e) {
                                                   actor_spec a;
                                                   a.name = "only";
                                                   a.type = "registry_role_type";
                                                   e.graph.actors.push_back(a);
                                                 },
                                                 true}));
  CHECK_FALSE(register_section_expander("pipeline", {}));
  auto v = make_vocabulary();
  CHECK(v.actor_types["registry_role_type"].role.holds_layers);
  REQUIRE(v.expanders.size() == 1);
  CHECK(v.expanders[0].first == "pipeline");
  CHECK(v.expanders[0].second.by_default);

  load_options o;
  o.check_corpus = false;
  auto r = load_graph_text(
    "model: {layers: 2, d_model: 8, heads: 2, context: 4}\ndata: {batch: 1}\ntrain: {steps: 1}\n", "g.yaml", o);
  // The default graph was expanded, and its entry holds layers by its type's role.
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].message == "registry_role_type 'only' needs 'layers: [first, end)' (the blocks it holds)");
  section_expander_registry().remove("pipeline");
  actor_registry().remove("registry_role_type");
}
