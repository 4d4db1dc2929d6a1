// The memory estimate of a graph's actors: state is 16 bytes a parameter
// (f32 weights, gradients and AdamW's two moments), activations follow the
// per-layer formula times the schedule's in-flight bound.
#include "deploy/cli/memory_estimate.hpp"

#include <doctest/doctest.h>

#include "deploy/run/model_size.hpp"
#include "deploy/run/run_graph.hpp"
#include "runtime/graph/graph_loader.hpp"

using namespace troupe;

namespace {

graph_spec load(const std::string& schedule) {
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  opts.check_corpus = false;
  auto r = load_graph_text("model: {layers: 4, d_model: 64, heads: 4, context: 32, vocab: 256}\n"
                           "data: {batch: 2}\ntrain: {steps: 1}\n"
                           "pipeline: {stages: 2, microbatches: 8, schedule: " +
                             schedule + "}\n",
                           "g.yaml", opts);
  INFO(to_string(r.errors));
  REQUIRE(r.ok());
  return *r.graph;
}

} // namespace

TEST_CASE("a stage's estimate is 16 bytes a parameter plus its layers' activations at the in-flight bound") {
  auto g = load("1f1b");
  auto est = estimate_memory(g);
  REQUIRE(est.size() == 2);
  auto params = count_parameters(g);
  CHECK(est[0].actor == "s0");
  CHECK(est[0].state == 16 * params.per_actor[0].second);
  CHECK(est[0].in_flight == 2); // 1F1B: at most the stages
  double per_layer = 2 * (34.0 * 32 * 2 * 64 + 5.0 * 4 * 32 * 32 * 2);
  CHECK(est[0].activations == static_cast<std::int64_t>(per_layer * 2 * 2));
  CHECK(est[1].activations > est[0].activations);          // the head's logits and their gradient
  CHECK(estimate_memory(load("gpipe"))[0].in_flight == 8); // GPipe holds every microbatch
  CHECK_FALSE(memory_problem(g, std::int64_t{1} << 40));
  auto why = memory_problem(g, 1000);
  REQUIRE(why);
  CHECK(why->find("more than this machine's 0.0 GB") != std::string::npos);
}
