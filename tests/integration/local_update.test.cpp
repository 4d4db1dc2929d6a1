// Local-update training through real actors (#13): DiLoCo with H = 1, one
// replica and an outer SGD step of lr 1 without momentum is plain training (to
// f32 rounding: torch's outer step g - lr(g - l) gives back l exactly only when
// g - l is exact, i.e. g and l within a factor 2 of each other); 4 replicas of DiLoCo and Streaming DiLoCo train with losses that
// the seed reproduces; each sync actor sends exactly its pseudo-gradients'
// bytes to each other replica every H/P steps, and nothing in between.
#include <cmath>
#include <map>
#include <string>

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "deploy/cli/run_graph.hpp"
#include "ops/gpt.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/trace/trace.hpp"

using namespace troupe;

namespace {

constexpr int steps = 12;

std::string graph_text(int replicas, const std::string& local_update, int seed = 5) {
  return fmt::format(R"(model:    {{layers: 2, d_model: 32, heads: 2, context: 16, vocab: 256}}
data:     {{corpus: kjv, batch: 2, seed: {}}}
train:    {{steps: {}, lr: 2.0e-3, weight_decay: 0.1, warmup: 2, eval_batches: 2}}
pipeline: {{stages: 2, microbatches: 2, schedule: 1f1b}}
{}{})",
                     seed, steps, replicas > 1 ? fmt::format("data_parallel: {{replicas: {}}}\n", replicas) : "",
                     local_update.empty() ? "" : "local_update: " + local_update + "\n");
}

run_result run(const std::string& text) {
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  auto loaded = load_graph_text(text, "local_update.yaml", opts);
  INFO(to_string(loaded.errors));
  REQUIRE(loaded.ok());
  troupe_config cfg{runtime_options_from_env()};
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, *loaded.graph);
  INFO(text, r ? std::string{} : sys.render(r.error()));
  REQUIRE(r);
  return *r;
}

/// Bytes each step's sends of actor `name` carried, from a traced run of `text`.
std::map<std::int32_t, std::uint64_t> sent_by_step(const std::string& text, const std::string& name) {
  auto& tr = trace_recorder::global();
  tr.reset();
  tr.enable(1 << 18);
  run(text);
  tr.disable();
  trace_recorder::cursor cur;
  std::vector<span> spans;
  tr.collect(cur, spans);
  std::uint16_t id = 0xffff;
  for (const auto& a : tr.actors())
    if (a.name == name)
      id = a.id;
  REQUIRE(id != 0xffff);
  std::map<std::int32_t, std::uint64_t> out;
  for (const auto& s : spans)
    if (s.actor == id && s.kind == span_kind::send)
      out[s.step] += s.bytes;
  return out;
}

} // namespace

TEST_CASE("DiLoCo with H = 1, one replica and outer SGD lr 1 without momentum equals plain training") {
  auto plain = run(graph_text(1, ""));
  auto diloco = run(graph_text(1, "{algorithm: diloco, sync_every: 1, outer: {lr: 1, momentum: 0}}"));
  REQUIRE(plain.losses.size() == steps);
  CHECK(plain.losses.back() < plain.losses.front());
  REQUIRE(diloco.losses.size() == steps);
  double worst = 0;
  int exact = 0;
  for (std::size_t i = 0; i < plain.losses.size(); ++i) {
    CAPTURE(i);
    auto rel = std::fabs(diloco.losses[i] - plain.losses[i]) / std::fabs(plain.losses[i]);
    CHECK(rel <= 1e-6);
    worst = std::max(worst, rel);
    exact += diloco.losses[i] == plain.losses[i];
  }
  CHECK(exact >= 2);  // the first steps, before any rounding can have entered
  REQUIRE(diloco.val_loss);
  CHECK(std::fabs(*diloco.val_loss - *plain.val_loss) <= 1e-6 * *plain.val_loss);
  MESSAGE(exact, " of ", steps, " losses bit-equal, largest relative difference ", worst);
  // The exchange is applied, not skipped: an outer lr of 0.5 halves every update.
  auto half = run(graph_text(1, "{algorithm: diloco, sync_every: 1, outer: {lr: 0.5, momentum: 0}}"));
  CHECK(half.losses.back() != plain.losses.back());
}

TEST_CASE("4 replicas of DiLoCo and Streaming DiLoCo train, their losses reproducible from the seed") {
  for (std::string lu : {"{algorithm: diloco, sync_every: 4}",
                         "{algorithm: streaming_diloco, sync_every: 4, fragments: 2, delay: 1, alpha: 0.5, "
                         "quantize: int8}"}) {
    CAPTURE(lu);
    auto a = run(graph_text(4, lu)), b = run(graph_text(4, lu)), other = run(graph_text(4, lu, 9));
    REQUIRE(a.losses.size() == steps);
    CHECK(a.losses == b.losses);
    CHECK(a.val_loss == b.val_loss);
    CHECK(a.losses != other.losses);
    CHECK(a.losses.back() < a.losses.front());
    MESSAGE(lu, ": loss ", a.losses.front(), " -> ", a.losses.back(), ", validation ", *a.val_loss);
  }
}

TEST_CASE("a sync actor reduce-scatters and all-gathers its pseudo-gradient once every H/P steps, and nothing else") {
  constexpr int replicas = 4, h = 4;
  ops::gpt_config cfg{2, 32, 2, 16, 256};
  auto values = ops::gpt_parameter_count(cfg, 0, 1);  // r0s0 holds the embeddings and block 0
  // Replica 0 owns the first rows·1/R rows of 1024 values: it sends the rest of its
  // pseudo-gradient to their owners, then its averaged rows to the R − 1 others.
  auto rows = (values + 1023) / 1024, own_rows = rows / replicas;
  auto own = std::min<std::int64_t>(values, own_rows * 1024);
  auto diloco = sent_by_step(graph_text(replicas, fmt::format("{{algorithm: diloco, sync_every: {}}}", h)), "r0s0_sync");
  REQUIRE(diloco.size() == steps / h);
  for (const auto& [step, bytes] : diloco) {
    CAPTURE(step);
    CHECK((step % h) == 0);  // after steps 4, 8, 12
    CHECK(bytes == static_cast<std::uint64_t>(((values - own) + (replicas - 1) * own) * 4));
  }
  auto int8 = sent_by_step(graph_text(replicas, fmt::format("{{algorithm: diloco, sync_every: {}, quantize: int8}}", h)),
                           "r0s0_sync");
  for (const auto& [step, bytes] : int8)  // a byte per value and an f32 scale per row
    CHECK(bytes == static_cast<std::uint64_t>((values - own) + 4 * (rows - own_rows) +
                                              (replicas - 1) * (own + 4 * own_rows)));
  // DDP's ring sends 2(R-1)/R of the gradient bytes every step.
  double ddp = 2.0 * (replicas - 1) / replicas * static_cast<double>(values) * 4 * steps;
  std::uint64_t total = 0, total8 = 0;
  for (auto [s, b] : diloco)
    total += b;
  for (auto [s, b] : int8)
    total8 += b;
  MESSAGE("r0s0 over ", steps, " steps: DDP ring ", ddp, " bytes, DiLoCo H=", h, " ", total, " (", ddp / total,
          "x fewer), int8 ", total8, " (", ddp / total8, "x fewer)");
}
