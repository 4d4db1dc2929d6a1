// `pipeline.wire: bf16`: training activations and gradients cross to other
// stage actors as bf16 — half the bytes — and the receiver widens them, so the
// run follows the f32 curve closely but not bit for bit (they were rounded).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/run_text.hpp"

using namespace troupe;

namespace {

run_result run(const std::string& wire, const std::string& extra = "") {
  auto text = fmt::format(R"(model:    {{layers: 2, d_model: 32, heads: 2, context: 32, vocab: 256}}
data:     {{corpus: kjv, batch: 4, seed: 6}}
train:    {{steps: 10, lr: 2.0e-3, warmup: 2, eval_batches: 1}}
pipeline: {{stages: 2, microbatches: 2, schedule: 1f1b, wire: {}}}
{})",
                          wire, extra);
  auto r = testing::run_graph_text(text, "wire.yaml");
  REQUIRE(r.losses.size() == 10);
  return r;
}

std::int64_t stage_bytes(const run_result& r) {
  std::int64_t n = 0;
  for (const auto& s : r.summaries)
    if (s.actor.starts_with("s") || s.actor.starts_with("r"))
      n += s.bytes_sent;
  return n;
}

} // namespace

TEST_CASE("bf16 on the wire halves the stages' bytes and keeps the f32 curve to 1e-3, not to the bit") {
  for (std::string extra : {"", "data_parallel: {replicas: 2}\nattention: {servers: in_place}\n"}) {
    CAPTURE(extra);
    auto f32 = run("f32", extra), bf16 = run("bf16", extra);
    // Activations and gradients only (attention tasks stay f32: they go to a server, not a stage's input).
    if (extra.empty())
      CHECK(stage_bytes(bf16) * 2 == stage_bytes(f32));
    bool differs = false;
    for (std::size_t i = 0; i < f32.losses.size(); ++i) {
      CAPTURE(i);
      CHECK(std::abs(bf16.losses[i] - f32.losses[i]) < 1e-3 * f32.losses[i]);
      differs |= bf16.losses[i] != f32.losses[i];
    }
    CHECK(differs);
  }
}
