// Local-update training through real actors (#13): DiLoCo with H = 1, one
// replica and an outer SGD step of lr 1 without momentum is plain training (to
// f32 rounding: torch's outer step g - lr(g - l) gives back l exactly only when
// g - l is exact, i.e. g and l within a factor 2 of each other); 4 replicas of DiLoCo and Streaming DiLoCo train with losses that
// the seed reproduces; each sync actor sends exactly its pseudo-gradients'
// bytes to each other replica every H/P steps, and nothing in between.
#include <cmath>
#include <map>
#include <set>
#include <string>

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "deploy/run/run_graph.hpp"
#include "ops/gpt.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/trace/trace.hpp"
#include "tests/integration/run_trace.hpp"

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

/// The spans of a traced run of `text`, and the trace's actor ids by name.
std::pair<std::vector<span>, std::map<std::string, std::uint16_t>> traced(const std::string& text) {
  auto t = testing::record_trace([&] { run(text); });
  return {std::move(t.spans), std::move(t.ids)};
}

/// Bytes each step's sends of actor `name` carried, from a traced run of `text`.
std::map<std::int32_t, std::uint64_t> sent_by_step(const std::string& text, const std::string& name,
                                                   std::map<std::int32_t, int>* messages = nullptr) {
  auto [spans, ids] = traced(text);
  REQUIRE(ids.contains(name));
  std::map<std::int32_t, std::uint64_t> out;
  for (const auto& s : spans)
    if (s.actor == ids[name] && s.kind == span_kind::send) {
      out[s.step] += s.bytes;
      if (messages)
        ++(*messages)[s.step];
    }
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
  CHECK(exact >= 2); // the first steps, before any rounding can have entered
  REQUIRE(diloco.val_loss);
  CHECK(std::fabs(*diloco.val_loss - *plain.val_loss) <= 1e-6 * *plain.val_loss);
  MESSAGE(exact, " of ", steps, " losses bit-equal, largest relative difference ", worst);
  // The exchange is applied, not skipped: an outer lr of 0.5 halves every update.
  auto half = run(graph_text(1, "{algorithm: diloco, sync_every: 1, outer: {lr: 0.5, momentum: 0}}"));
  CHECK(half.losses.back() != plain.losses.back());
}

TEST_CASE("4 replicas of every method train, their losses reproducible from the seed") {
  for (std::string lu : {"{algorithm: diloco, sync_every: 4}",
                         "{algorithm: streaming_diloco, sync_every: 4, fragments: 2, delay: 1, alpha: 0.5, "
                         "quantize: int8}",
                         "{algorithm: noloco, sync_every: 4, group: 2}",
                         "{algorithm: desloc, periods: {params: 2, momentum: 4, variance: 8}}",
                         "{algorithm: sparseloco, sync_every: 4, density: 0.05}"}) {
    CAPTURE(lu);
    auto a = run(graph_text(4, lu)), b = run(graph_text(4, lu)), other = run(graph_text(4, lu, 9));
    REQUIRE(a.losses.size() == steps);
    REQUIRE(b.losses.size() == steps);
    if (lu.find("noloco") == std::string::npos) {
      CHECK(a.losses == b.losses);
      CHECK(a.val_loss == b.val_loss);
    } else {
      // NoLoCo's random routes bring a stage microbatches from several replicas in
      // the order they arrive, and its gradients are summed in that order: runs
      // agree to f32 rounding, not bit for bit.
      double worst = 0;
      for (std::size_t i = 0; i < a.losses.size(); ++i)
        worst = std::max(worst, std::fabs(a.losses[i] - b.losses[i]) / std::fabs(b.losses[i]));
      CHECK(worst <= 1e-5);
      CHECK(std::fabs(*a.val_loss - *b.val_loss) <= 1e-5 * *b.val_loss);
      MESSAGE("noloco: two runs differ by at most ", worst, " relative");
    }
    CHECK(a.losses != other.losses);
    CHECK(a.losses.back() < a.losses.front());
    MESSAGE(lu, ": loss ", a.losses.front(), " -> ", a.losses.back(), ", validation ", *a.val_loss);
  }
}

TEST_CASE("a sync actor reduce-scatters and all-gathers its pseudo-gradient once every H/P steps, and nothing else") {
  constexpr int replicas = 4, h = 4;
  ops::gpt_config cfg{2, 32, 2, 16, 256};
  auto values = ops::gpt_parameter_count(cfg, 0, 1); // r0s0 holds the embeddings and block 0
  // Replica 0 owns the first rows·1/R rows of 1024 values: it sends the rest of its
  // pseudo-gradient to their owners, then its averaged rows to the R − 1 others.
  auto rows = (values + 1023) / 1024, own_rows = rows / replicas;
  auto own = std::min<std::int64_t>(values, own_rows * 1024);
  auto diloco =
    sent_by_step(graph_text(replicas, fmt::format("{{algorithm: diloco, sync_every: {}}}", h)), "r0s0_sync");
  REQUIRE(diloco.size() == steps / h);
  for (const auto& [step, bytes] : diloco) {
    CAPTURE(step);
    CHECK((step % h) == 0); // after steps 4, 8, 12
    CHECK(bytes == static_cast<std::uint64_t>(((values - own) + (replicas - 1) * own) * 4));
  }
  auto int8 = sent_by_step(
    graph_text(replicas, fmt::format("{{algorithm: diloco, sync_every: {}, quantize: int8}}", h)), "r0s0_sync");
  for (const auto& [step, bytes] : int8) // a byte per value and an f32 scale per row
    CHECK(bytes ==
          static_cast<std::uint64_t>((values - own) + 4 * (rows - own_rows) + (replicas - 1) * (own + 4 * own_rows)));
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

TEST_CASE("NoLoCo exchanges with its group only, and its activations cross replicas by random routes") {
  constexpr int replicas = 4, h = 4;
  ops::gpt_config cfg{2, 32, 2, 16, 256};
  auto values = ops::gpt_parameter_count(cfg, 0, 1);
  std::map<std::int32_t, int> messages;
  auto sent = sent_by_step(graph_text(replicas, fmt::format("{{algorithm: noloco, sync_every: {}, group: 2}}", h)),
                           "r0s0_sync", &messages);
  REQUIRE(sent.size() == steps / h);
  for (const auto& [step, bytes] : sent) {
    CAPTURE(step);
    CHECK(messages[step] == 1);                                 // one message, to its one partner: no collective
    CHECK(bytes == static_cast<std::uint64_t>(2 * values * 4)); // its fast and slow weights
  }
  // With random routes a stage takes other replicas' microbatches (numbered in the
  // whole step: replica k mod R's data), yet each step exactly its own share of them.
  auto [spans, ids] = traced(graph_text(replicas, "{algorithm: noloco, sync_every: 4, group: 2}"));
  for (int r = 0; r < replicas; ++r) {
    auto name = fmt::format("r{}s1", r);
    std::map<std::int32_t, std::set<int>> got; // step -> microbatches whose activation arrived
    for (const auto& s : spans)
      if (s.actor == ids[name] && s.kind == span_kind::receive && s.flow != 0 && s.step >= 0)
        got[s.step].insert(s.microbatch);
    CAPTURE(name);
    REQUIRE(got.size() >= static_cast<std::size_t>(steps));
    int foreign = 0;
    for (const auto& [step, mbs] : got) {
      CHECK(mbs.size() >= 2); // its 2 microbatches
      for (int mb : mbs)
        foreign += mb % replicas != r;
    }
    CHECK(foreign > 0);
  }
}

TEST_CASE("DES-LOC sends parameters, first and second moments each on its own period") {
  auto sent =
    sent_by_step(graph_text(4, "{algorithm: desloc, periods: {params: 2, momentum: 4, variance: 8}}"), "r0s0_sync");
  REQUIRE(sent.size() == steps / 2);
  auto p = sent.at(2);        // parameters alone
  CHECK(sent.at(4) == 2 * p); // parameters and first moments
  CHECK(sent.at(6) == p);
  CHECK(sent.at(8) == 3 * p); // all three
  CHECK(sent.at(12) == 2 * p);
}

TEST_CASE("SparseLoCo sends a sparse part to every other replica, a small share of the dense bytes") {
  constexpr int replicas = 4;
  ops::gpt_config cfg{2, 32, 2, 16, 256};
  auto values = ops::gpt_parameter_count(cfg, 0, 1);
  std::map<std::int32_t, int> messages;
  auto sent =
    sent_by_step(graph_text(replicas, "{algorithm: sparseloco, sync_every: 4, density: 0.02}"), "r0s0_sync", &messages);
  REQUIRE(sent.size() == steps / 4);
  for (const auto& [step, bytes] : sent) {
    CHECK(messages[step] == replicas - 1);
    // 2% of the entries, 2 bytes of index and 2 bits each, 8 bytes of scales per 4096: ~1/65 of f32.
    CHECK(bytes * 40 < static_cast<std::uint64_t>((replicas - 1) * values * 4));
  }
}
