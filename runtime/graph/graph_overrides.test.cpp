// Tests of `--set key.path=value` overrides: applied before validation and
// checked exactly like the file, with errors that name the override.
#include "runtime/graph/graph_loader.hpp"

#include <doctest/doctest.h>

#include "actors/builtin.hpp"

namespace {

using namespace troupe;

// runtime/ names no actor type: the built-in types' roles and the `pipeline:`
// expander come from actors/ (this test links it).
[[maybe_unused]] const bool builtin_types = (register_builtin_actors(), true);

constexpr const char* base = R"(model: {layers: 4, d_model: 8, heads: 2, context: 4}
data: {batch: 1}
train: {steps: 3}
pipeline: {stages: 2, schedule: gpipe}
actors:
  - {name: s0, device: cpu}
)";

load_result with(std::vector<std::string> sets) {
  load_options o;
  o.check_corpus = false;
  o.overrides = std::move(sets);
  return load_graph_text(base, "g.yaml", o);
}

} // namespace

TEST_CASE("an override replaces a value and adds a missing section") {
  auto r = with({"pipeline.stages=4", "model.precision=bf16", "trace.file=out.json", "train.lr=2e-4"});
  REQUIRE_MESSAGE(r.ok(), to_string(r.errors));
  CHECK(r.graph->pipeline.stages == 4);
  CHECK(r.graph->model.precision == dtype::bf16);
  CHECK(r.graph->trace.file == "out.json");
  CHECK(r.graph->train.lr == doctest::Approx(2e-4));
}

TEST_CASE("an override reaches list entries and takes flow lists as values") {
  auto r = with({"actors[0].node=box2", "pipeline.stages=1", "actors[0].name=s0", "actors[0].type=pipeline_stage",
                 "actors[0].layers=[0, 4]"});
  REQUIRE_MESSAGE(r.ok(), to_string(r.errors));
  CHECK(r.graph->find_actor("s0")->node == "box2");
  CHECK(r.graph->find_actor("s0")->layers == std::vector<layer_range>{{0, 4}});
}

TEST_CASE("a bad override value is reported against the --set argument") {
  auto r = with({"pipeline.schedule=1fb1"});
  REQUIRE(r.errors.size() == 1);
  CHECK(to_string(r.errors[0]) ==
        "--set pipeline.schedule=1fb1: pipeline.schedule: unknown schedule '1fb1' (did "
        "you mean '1f1b'? known: gpipe, 1f1b, interleaved_1f1b, zb_h1, zbv, v_half, v_min, dualpipev, table)");
  r = with({"model.heads=3"});
  REQUIRE(r.errors.size() == 1);
  CHECK(to_string(r.errors[0]).starts_with("g.yaml:1:29: model.d_model: d_model 8 is not divisible by heads 3"));
}

TEST_CASE("an override of an unknown key is an error naming the --set argument and the nearest key") {
  auto r = with({"model.layer=2"});
  REQUIRE(r.errors.size() == 1);
  CHECK(to_string(r.errors[0]) ==
        "--set model.layer=2: model.layer: unknown key 'layer' (did you mean 'layers'? "
        "known: family, layers, d_model, heads, context, vocab, precision, kv_heads, ffn_hidden, rope_theta, "
        "tie_embeddings, norm_eps)");
}

TEST_CASE("malformed overrides are reported, and other errors still are too") {
  auto r = with({"pipeline.stages", "=3", "a..b=1", "actors[5].node=x", "model.layers.x=1", "model.layers=0"});
  auto text = to_string(r.errors);
  CHECK(r.errors.size() == 6);
  CHECK(text.find("--set pipeline.stages: expected KEY.PATH=VALUE") != std::string::npos);
  CHECK(text.find("--set a..b=1: 'a..b' is not a key path") != std::string::npos);
  CHECK(text.find("--set actors[5].node=x: cannot set 'actors[5].node': 'actors' has no entry [5]") !=
        std::string::npos);
  CHECK(text.find("--set model.layers.x=1: cannot set 'model.layers.x': 'model.layers' is '4', not a mapping") !=
        std::string::npos);
  CHECK(text.find("--set model.layers=0: model.layers: must be at least 1, got 0") != std::string::npos);
}
