// Routes that cross replicas, launched over node processes (#25 item 4):
// SkipPipe's planned paths (under gpipe and 1f1b), least_loaded routing and
// NoLoCo's random routes (over interleaved chunks) send a microbatch to another
// replica's stage at a hop, over a channel between nodes; a launched run must
// give the one-process run's losses.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/skip_network.hpp"
#include "tests/integration/troupe_process.hpp"

using namespace troupe::testing;

namespace {

/// 4 positions × 2 replicas, paths of 3 of the 4 stages planned over 8 network nodes.
const std::string skip_graph = R"(model:    {layers: 8, d_model: 32, heads: 2, context: 16, vocab: 256}
data:     {corpus: kjv, batch: 2, seed: 5}
train:    {steps: 6, lr: 2.0e-3, warmup: 2, eval_batches: 1}
pipeline: {stages: 4, microbatches: 4, schedule: gpipe}
data_parallel: {replicas: 2}
)" + skip_network8 + R"(skip: {path_length: 3, memory: 3}
)";

/// The launched run's six losses are the one-process run's, each to `tolerance` (relative).
void same_losses(const one_and_launched& r, double tolerance) {
  REQUIRE(r.one.size() == 6);
  REQUIRE(r.launched.size() == r.one.size());
  for (std::size_t i = 0; i < r.one.size(); ++i)
    CHECK(std::fabs(r.launched[i] - r.one[i]) <= tolerance * std::fabs(r.one[i]));
}

} // namespace

TEST_CASE("SkipPipe's paths launched over two node processes give the one-process losses") {
  auto r = run_one_and_launched("skip_mp", skip_graph);
  INFO(r.launched_out);
  CHECK(r.launched_out.find("validation on a path of 3 of 4 stages") != std::string::npos); // the paths ran
  same_losses(r, 1e-6);
}

TEST_CASE("SkipPipe's paths under 1f1b launched over two node processes give the one-process losses") {
  // Six microbatches per stage-0 node, more than 1F1B lets it hold (3 stages and the head): it
  // waits for backwards that come back over the nodes' channels before it starts more.
  auto graph = skip_graph;
  graph.replace(graph.find("microbatches: 4, schedule: gpipe"), 32, "microbatches: 6, schedule: 1f1b");
  graph.replace(graph.find("memory: 3"), 9, "memory: 4");
  auto r = run_one_and_launched("skip_1f1b_mp", graph);
  INFO(r.launched_out);
  CHECK(r.launched_out.find("validation on a path of 3 of 4 stages") != std::string::npos);
  same_losses(r, 1e-6);
}

TEST_CASE("least_loaded routing launched over two node processes gives the one-process losses") {
  // Replica 1's last stage is three times slower, so the routes cross between the nodes.
  const std::string graph = R"(model:    {layers: 8, d_model: 32, heads: 2, context: 16, vocab: 256}
data:     {corpus: kjv, batch: 2, seed: 5}
train:    {steps: 6, lr: 2.0e-3, warmup: 2, eval_batches: 1}
pipeline: {stages: 2, microbatches: 4, schedule: 1f1b}
data_parallel: {replicas: 2, route: least_loaded}
actors:
  - {name: r1s1, slowdown: 3}
)";
  auto r = run_one_and_launched("least_loaded_mp", graph);
  INFO(r.launched_out);
  same_losses(r, 1e-5); // float summation order
}

TEST_CASE("NoLoCo's random routes over interleaved chunks launched over two node processes give the one-process "
          "losses") {
  // Each replica on its own node: a first chunk's hop to the other replica, and
  // the later chunk's wrap back to the replica that ran it, cross between the nodes.
  const std::string graph = R"(model:    {layers: 8, d_model: 32, heads: 2, context: 16, vocab: 256}
data:     {corpus: kjv, batch: 2, seed: 5}
train:    {steps: 6, lr: 2.0e-3, warmup: 2, eval_batches: 1}
pipeline: {stages: 2, microbatches: 4, schedule: interleaved_1f1b, virtual: 2}
data_parallel: {replicas: 2, bucket: 16KB}
local_update: {algorithm: noloco, sync_every: 2, route: random}
)";
  auto r = run_one_and_launched("noloco_interleaved_mp", graph);
  INFO(r.launched_out);
  same_losses(r, 1e-5); // arrival order of the sums
}
