// The V-shaped schedules train as real actors: zbv, v_half, v_min and dualpipev on 2
// stages of two chunks each (stage 0 holds the first and last quarter of the
// layers and computes the loss) follow the one-stage loss curve to 1e-5.
#include <cmath>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/run_text.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

std::string graph(int stages, const std::string& schedule, int virt, const std::string& data = "",
                  const std::string& extra = "") {
  return fmt::format(R"(model: {{layers: 4, d_model: 32, heads: 2, context: 16, vocab: 256}}
data: {{corpus: kjv, batch: 4, seed: 3{}}}
train: {{steps: 6, lr: 2.0e-3, warmup: 2, eval_batches: 1}}
pipeline: {{stages: {}, microbatches: 4, schedule: {}, virtual: {}}}
{})",
                     data, stages, schedule, virt, extra);
}

void check_curve(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    CHECK(std::fabs(got[i] - want[i]) <= 1e-5 * std::fabs(want[i]));
}

} // namespace

TEST_CASE("zbv, v_half, v_min and dualpipev on 2 stages x 2 chunks follow the one-stage loss curve to 1e-5") {
  auto one = run_graph_text(graph(1, "gpipe", 1), "tests/one_stage.yaml");
  REQUIRE(one.losses.size() == 6);
  for (std::string schedule : {"zbv", "v_half", "v_min", "dualpipev"}) { // dualpipev's F&B fuses real passes
    INFO(schedule);
    auto v = run_graph_text(graph(2, schedule, 2), "tests/" + schedule + ".yaml");
    check_curve(v.losses, one.losses);
  }
}

TEST_CASE("zbv with data parallelism (ZeRO 0 and 2) and with attention servers follows the same mechanisms on gpipe") {
  const std::string docs = ", documents: long_tail";
  for (std::string extra :
       {"data_parallel: {replicas: 2, bucket: 16KB}", "data_parallel: {replicas: 2, bucket: 16KB, zero: 2}",
        "data_parallel: {replicas: 2, bucket: 16KB}\nattention: {servers: in_place, nano_batches: 2}"}) {
    INFO(extra);
    auto want = run_graph_text(graph(2, "gpipe", 1, docs, extra), "tests/gpipe.yaml");
    auto got = run_graph_text(graph(2, "zbv", 2, docs, extra), "tests/zbv.yaml");
    check_curve(got.losses, want.losses);
  }
}

TEST_CASE("a V-shaped schedule lays its chunks out in a V and refuses one chunk per stage") {
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  auto loaded = load_graph_text(graph(2, "zbv", 2), "tests/zbv.yaml", opts);
  REQUIRE(loaded.ok());
  const auto* s0 = loaded.graph->find_actor("s0");
  const auto* s1 = loaded.graph->find_actor("s1");
  REQUIRE(s0);
  REQUIRE(s1);
  REQUIRE(s0->layers.size() == 2);
  CHECK(s0->layers[0].begin == 0); // stage 0: the first quarter and the last
  CHECK(s0->layers[1].begin == 3);
  CHECK(s1->layers[0].begin == 1); // stage 1: the turn
  CHECK(s1->layers[1].begin == 2);
  auto one = load_graph_text(graph(2, "v_min", 1), "tests/v_min.yaml", opts);
  REQUIRE(!one.ok());
  CHECK(to_string(one.errors).find("tests/v_min.yaml:4:") != std::string::npos);
  CHECK(to_string(one.errors).find("two model chunks per rank") != std::string::npos);
  auto few = load_graph_text(graph(3, "dualpipev", 2), "tests/dualpipev.yaml", opts); // 4 microbatches < 2 x 3
  REQUIRE(!few.ok());
  CHECK(to_string(few.errors).find("tests/dualpipev.yaml:4:") != std::string::npos);
  CHECK(to_string(few.errors).find("pipeline.microbatches: dualpipev: needs at least 2 x stages = 6") !=
        std::string::npos);
}
