// The Llama family trains as real actors: 4 stages follow the one-stage loss curve
// to 1e-5 with packed documents, and the mechanisms beside the pipeline (ZeRO
// replicas, attention servers, zero-bubble halves) follow the same curve as plain GPipe.
#include <cmath>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/run_text.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

std::string graph(int stages, const std::string& schedule, const std::string& model = "",
                  const std::string& extra = "") {
  return fmt::format(R"(model: {{family: llama, layers: 4, d_model: 32, heads: 4, kv_heads: 2, context: 16{}}}
data: {{corpus: kjv, batch: 4, seed: 3, documents: long_tail}}
train: {{steps: 6, lr: 3.0e-3, warmup: 2, eval_batches: 1}}
pipeline: {{stages: {}, microbatches: 4, schedule: {}}}
{})",
                     model, stages, schedule, extra);
}

void check_curve(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    CHECK(std::fabs(got[i] - want[i]) <= 1e-5 * std::fabs(want[i]));
}

} // namespace

TEST_CASE("a llama graph trains and 4 stages follow the one-stage loss curve to 1e-5") {
  auto one = run_graph_text(graph(1, "gpipe"), "tests/llama1.yaml");
  REQUIRE(one.losses.size() == 6);
  CHECK(one.losses.back() < one.losses.front() - 0.1); // it learns
  auto four = run_graph_text(graph(4, "1f1b"), "tests/llama4.yaml");
  check_curve(four.losses, one.losses);
  // A tied head is another model: same start (the embedding is drawn as before), another curve.
  auto tied = run_graph_text(graph(1, "gpipe", ", tie_embeddings: true"), "tests/llama_tied.yaml");
  REQUIRE(tied.losses.size() == 6);
  CHECK(tied.losses.back() < tied.losses.front() - 0.1);
  CHECK(std::fabs(tied.losses[5] - one.losses[5]) > 1e-4);
}

// Attention servers run forward_begin's pieces; the plain forward is what they must match.
TEST_CASE("llama with ZeRO replicas, attention servers and zero-bubble halves follows plain gpipe's curve") {
  const std::string zero = "data_parallel: {replicas: 2, bucket: 16KB, zero: 2}";
  for (auto [want_extra, got_extra] :
       {std::pair<std::string, std::string>{zero, zero}, {"", "attention: {servers: in_place, nano_batches: 2}"}}) {
    INFO(got_extra);
    auto want = run_graph_text(graph(2, "gpipe", "", want_extra), "tests/gpipe.yaml");
    auto got = run_graph_text(graph(2, "zb_h1", "", got_extra), "tests/zb_h1.yaml");
    check_curve(got.losses, want.losses);
  }
}

// Local update over Llama stages: DiLoCo with H = 1, one replica and an outer SGD
// step of lr 1 without momentum is plain training (tests/integration/local_update.test.cpp
// checks the same for GPT-2); 2 replicas of Streaming DiLoCo learn.
TEST_CASE("llama under local update: DiLoCo H = 1, outer lr 1, no momentum = plain training; streaming learns") {
  auto plain = run_graph_text(graph(2, "1f1b"), "tests/llama_plain.yaml");
  auto diloco = run_graph_text(
    graph(2, "1f1b", "", "local_update: {algorithm: diloco, sync_every: 1, outer: {lr: 1, momentum: 0}}"),
    "tests/llama_diloco.yaml");
  REQUIRE(diloco.losses.size() == plain.losses.size());
  for (std::size_t i = 0; i < plain.losses.size(); ++i)
    CHECK(std::fabs(diloco.losses[i] - plain.losses[i]) <= 1e-6 * std::fabs(plain.losses[i]));
  // The outer step is really taken: at outer lr 0.5 the curve leaves plain training's.
  auto half = run_graph_text(
    graph(2, "1f1b", "", "local_update: {algorithm: diloco, sync_every: 1, outer: {lr: 0.5, momentum: 0}}"),
    "tests/llama_diloco_half.yaml");
  REQUIRE(half.losses.size() == plain.losses.size());
  CHECK(std::fabs(half.losses.back() - plain.losses.back()) > 1e-4);
  auto streaming = run_graph_text(graph(2, "1f1b", "",
                                        "data_parallel: {replicas: 2}\n"
                                        "local_update: {algorithm: streaming_diloco, sync_every: 2, fragments: 2}"),
                                  "tests/llama_streaming.yaml");
  REQUIRE(streaming.losses.size() == 6);
  CHECK(streaming.losses.back() < streaming.losses.front() - 0.1);
}
