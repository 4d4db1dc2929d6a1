// The data-parallel tests' shared pieces: the small graph they train, an
// in-process run of it, and the loss-curve comparison to 1e-5.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "deploy/run/run_graph.hpp"
#include "runtime/actor/actor_system.hpp"
#include "tests/integration/troupe_process.hpp"

namespace troupe::testing {

constexpr int dp_steps = 20;
constexpr int dp_microbatches = 2;
constexpr int dp_batch = 2; ///< per replica

/// 4 layers, `stages` stages of 1F1B over 2 microbatches of `batch_size`, 20
/// steps; with `replicas` > 1 a data_parallel section (64KB buckets, ZeRO stage `zero`).
inline std::string dp_graph(int replicas, int stages, int batch_size, const std::string& extra = "", int d_model = 64,
                            int zero = 0) {
  return fmt::format(R"(model:    {{layers: 4, d_model: {}, heads: 2, context: 32, vocab: 256}}
data:     {{corpus: kjv, batch: {}, seed: 5}}
train:    {{steps: {}, lr: 2.0e-3, weight_decay: 0.1, warmup: 5, eval_batches: 2}}
pipeline: {{stages: {}, microbatches: {}, schedule: 1f1b}}
{}{})",
                     d_model, batch_size, dp_steps, stages, dp_microbatches,
                     replicas > 1 ? fmt::format("data_parallel: {{replicas: {}, bucket: 64KB{}}}\n", replicas,
                                                zero > 0 ? fmt::format(", zero: {}", zero) : "")
                                  : "",
                     extra);
}

/// Runs `text` in this process; `threads` workers (0: one per core).
inline run_result run_in_process(const std::string& text, std::size_t threads = 0) {
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  auto loaded = load_graph_text(text, "ddp.yaml", opts);
  INFO(to_string(loaded.errors));
  REQUIRE(loaded.ok());
  auto o = runtime_options_from_env();
  if (threads)
    o.threads = threads;
  troupe_config cfg{o};
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, *loaded.graph);
  INFO(text, r ? std::string{} : sys.render(r.error()));
  REQUIRE(r);
  return *r;
}

/// Each loss of `got` within 1e-5 (relative) of `ref`'s.
inline void check_same_curve(const std::vector<double>& got, const std::vector<double>& ref) {
  REQUIRE(got.size() == ref.size());
  double worst = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(got[i] - ref[i]) <= 1e-5 * std::fabs(ref[i]));
    worst = std::max(worst, std::fabs(got[i] - ref[i]) / std::fabs(ref[i]));
  }
  MESSAGE("largest relative difference over ", ref.size(), " steps: ", worst, " (loss ", ref.front(), " -> ",
          ref.back(), ")");
}

} // namespace troupe::testing
