// Tied embeddings across processes: a tied llama over 4 stages launched on 2
// node processes (s0, s1 | s2, s3), so the embedding's stage and the head's
// exchange their gradients of the tied matrix over a channel, gives the
// one-process losses, with and without DiLoCo.
#include <cmath>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/troupe_process.hpp"

using namespace troupe::testing;

// Under DiLoCo the embedding's stage also sends the head's its new matrix after
// each outer step (tied_value_msg), over the same channel.
TEST_CASE("a tied llama on 4 stages launched over two node processes gives the one-process losses, under DiLoCo "
          "too") {
  for (std::string extra : {"", "local_update: {algorithm: diloco, sync_every: 2}\n"}) {
    CAPTURE(extra);
    const std::string graph =
      R"(model: {family: llama, layers: 4, d_model: 32, heads: 4, kv_heads: 2, context: 16, tie_embeddings: true}
data: {corpus: kjv, batch: 4, seed: 3}
train: {steps: 6, lr: 3.0e-3, warmup: 2, eval_batches: 1, grad_clip: 0.05}
pipeline: {stages: 4, microbatches: 4, schedule: 1f1b}
)" + extra;
    auto r = run_one_and_launched("tied_mp", graph);
    INFO(r.launched_out);
    REQUIRE(r.one.size() == 6);
    REQUIRE(r.launched.size() == r.one.size());
    double worst = 0;
    for (std::size_t i = 0; i < r.one.size(); ++i)
      worst = std::max(worst, std::fabs(r.launched[i] - r.one[i]) / std::fabs(r.one[i]));
    MESSAGE(fmt::format("{}launched against one process: largest relative difference {:.2e}", extra, worst));
    CHECK(worst <= 1e-6);
  }
}
