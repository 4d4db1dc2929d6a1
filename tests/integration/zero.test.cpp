// ZeRO stages 1 and 2 through real actors, in one process: R replicas of batch
// b with optimizer shards follow the curve of one replica of batch R·b (R = 2
// here; 4 in data_parallel.slow.test.cpp) under global-norm clipping; each
// shard holds 1/R of its position's AdamW state (and in stage 2 of its
// gradient) as the run reports and `troupe check` predicts; a shard sends
// 2(R-1)/R of its stage's gradient bytes a step (and /metrics shows both); a resumed ZeRO-2 run
// continues the uninterrupted curve.
#include <cmath>
#include <fstream>
#include <regex>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/zero_shard_state.hpp"
#include "deploy/run/model_size.hpp"
#include "ops/gpt.hpp"
#include "runtime/trace/dashboard_server.hpp"
#include "runtime/trace/trace.hpp"
#include "runtime/trace/trace_export.hpp"
#include "runtime/trace/trace_summary.hpp"
#include "tests/integration/data_parallel_graph.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

/// The graph with global-norm clipping at `clip` (the default 1.0 otherwise).
std::string clipped(std::string text, double clip) {
  auto at = text.find("eval_batches: 2}");
  REQUIRE(at != std::string::npos);
  return text.replace(at, 16, fmt::format("eval_batches: 2, grad_clip: {}}}", clip));
}

const run_summary& summary_of(const run_result& r, const std::string& actor) {
  for (const auto& s : r.summaries)
    if (s.actor == actor)
      return s;
  FAIL("no summary from " << actor);
  throw std::logic_error("unreachable");
}

} // namespace

TEST_CASE("ZeRO 1 and 2: 2 replicas of batch b follow one replica of batch 2b to 1e-5, clipped by the global norm") {
  // Clipping at 0.05 scales every step's update: the norm must be the global
  // one, summed over every shard's slice of every position. (R = 4 and one
  // stage: data_parallel.slow.test.cpp.)
  auto ref = run_in_process(clipped(dp_graph(1, 2, 2 * dp_batch), 0.05)).losses;
  REQUIRE(ref.size() == dp_steps);
  CHECK(ref.back() < ref.front());
  ops::gpt_config cfg{4, 64, 2, 32, 256};
  auto grad_bytes = ops::gpt_parameter_count(cfg, 0, 2) * 4; // stage 0 of 2: no loss bucket
  for (int zero : {1, 2}) {
    CAPTURE(zero);
    auto got = run_in_process(clipped(dp_graph(2, 2, dp_batch, "", 64, zero), 0.05));
    check_same_curve(got.losses, ref);
    // The state is in the shards, not the stages.
    CHECK(summary_of(got, "r0s0").optimizer_bytes == 0);
    CHECK(summary_of(got, "r0s0_os").optimizer_bytes > 0);
    // Reduce-scatter then all-gather: 2(R-1)/R of the gradient bytes a step, as an all-reduce.
    auto sent = summary_of(got, "r0s0_os").bytes_sent;
    MESSAGE("ZeRO-", zero, ": r0s0_os sent ", sent / dp_steps, " bytes a step for ", grad_bytes, " gradient bytes");
    CHECK(sent * 2 == 2 * (2 - 1) * grad_bytes * dp_steps);
  }
  // Unclipped, the curve is another: the clipping above did act.
  auto free = run_in_process(clipped(dp_graph(1, 2, 2 * dp_batch), 1e6)).losses;
  CHECK(std::fabs(free.back() - ref.back()) > 1e-3 * std::fabs(ref.back()));
}

TEST_CASE("for the main example's model, reported and predicted memory equal ZeRO's formulas to the byte") {
  // The model of examples/tiny-gpt.yaml, its 4 stages, a short run of each ZeRO stage.
  std::ifstream in("examples/tiny-gpt.yaml"); // tests run in the source tree
  REQUIRE(in);
  std::string example{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::smatch model;
  REQUIRE(std::regex_search(example, model, std::regex{R"(model:\s*\{([^}]*)\})"}));
  ops::gpt_config cfg{4, 128, 4, 64, 256};
  REQUIRE(model[1].str() == "layers: 4, d_model: 128, heads: 4, context: 64, vocab: 256");
  struct config {
    int replicas, zero;
  };
  for (auto [replicas, zero] : {config{2, 0}, config{2, 1}, config{4, 2}}) {
    CAPTURE(replicas);
    CAPTURE(zero);
    auto text = fmt::format(R"(model:    {{{}}}
data:     {{corpus: kjv, batch: 1, seed: 1}}
train:    {{steps: 1, lr: 1.0e-3, warmup: 1, eval_batches: 1}}
pipeline: {{stages: 4, microbatches: 4, schedule: 1f1b}}
data_parallel: {{replicas: {}, zero: {}}}
)",
                            model[1].str(), replicas, zero);
    load_options opts;
    opts.vocabulary = troupe_vocabulary;
    auto g = load_graph_text(text, "tiny.yaml", opts);
    REQUIRE(g.ok());
    auto& tr = trace_recorder::global(); // traced, for what /metrics shows
    tr.reset();
    tr.enable(1 << 18);
    auto r = run_in_process(text);
    tr.disable();
    auto metrics = prometheus_metrics(summarize(snapshot_trace()));
    tr.reset();
    // `troupe check` prints the same prediction, from the graph alone.
    auto file = fs::temp_directory_path() / ("troupe_zero_check_" + std::to_string(::getpid()) + ".yaml");
    std::ofstream{file} << text;
    auto out = file.string() + ".out";
    REQUIRE(sh(troupe_exe() + " check " + file.string() + " > " + out) == 0);
    auto printed = slurp(out);
    fs::remove(file), fs::remove(out);
    for (const auto& a : g.graph->actors) {
      if (!a.role.holds_layers)
        continue;
      CAPTURE(a.name);
      // Ψ of this position: f32 parameters 4Ψ, gradients 4Ψ, AdamW moments 8Ψ.
      std::int64_t psi = 0;
      for (const auto& l : a.layers)
        psi += ops::gpt_parameter_count(cfg, l.begin, l.end);
      REQUIRE(psi % replicas == 0); // every tensor of this model divides by 4: Ψ/R is exact
      auto predicted = predict_held(*g.graph, a);
      CHECK(printed.find(fmt::format("#   {} params {} grads {} optimizer {}\n", a.name, predicted.stage.params,
                                     predicted.stage.grads, predicted.stage.optimizer)) != std::string::npos);
      if (zero > 0)
        CHECK(printed.find(fmt::format("#   {}_os params {} grads {} optimizer {}\n", a.name, predicted.shard.params,
                                       predicted.shard.grads, predicted.shard.optimizer)) != std::string::npos);
      const auto& stage = summary_of(r, a.name);
      CHECK(stage.params_bytes == predicted.stage.params);
      CHECK(stage.grads_bytes == predicted.stage.grads);
      CHECK(stage.optimizer_bytes == predicted.stage.optimizer);
      CHECK(stage.params_bytes == 4 * psi);
      // The backward's accumulation buffer; ZeRO-2 gives it back once the step's
      // parameters are gathered, so between steps (when a run reports) it holds none.
      CHECK(stage.grads_bytes == (zero == 2 ? 0 : 4 * psi));
      if (zero == 0) {
        CHECK(stage.optimizer_bytes == 8 * psi);
        continue;
      }
      const auto& shard = summary_of(r, a.name + "_os");
      for (const auto& [kind, v] : {std::pair{"params", shard.params_bytes}, std::pair{"grads", shard.grads_bytes},
                                    std::pair{"optimizer", shard.optimizer_bytes}})
        CHECK(metrics.find(fmt::format("troupe_actor_memory_bytes{{actor=\"{}_os\",type=\"optimizer_shard\",node=\"0\","
                                       "kind=\"{}\"}} {}\n",
                                       a.name, kind, v)) != std::string::npos);
      CHECK(
        metrics.find(fmt::format("troupe_actor_bytes_sent{{actor=\"{}_os\",type=\"optimizer_shard\",node=\"0\"}} {}\n",
                                 a.name, shard.bytes_sent)) != std::string::npos);
      CHECK(shard.params_bytes == predicted.shard.params);
      CHECK(shard.grads_bytes == predicted.shard.grads);
      CHECK(shard.optimizer_bytes == predicted.shard.optimizer);
      CHECK(stage.optimizer_bytes == 0);
      CHECK(shard.optimizer_bytes == 8 * psi / replicas);               // stage 1: 4Ψ + 4Ψ + 8Ψ/R
      CHECK(shard.grads_bytes == (zero == 2 ? 4 * psi / replicas : 0)); // stage 2: the gradient slice 4Ψ/R
      // ZeRO's formulas: stage 1 4Ψ + 4Ψ + 8Ψ/R, stage 2 4Ψ + 12Ψ/R.
      CHECK(stage.params_bytes + stage.grads_bytes + shard.optimizer_bytes + shard.grads_bytes ==
            (zero == 2 ? 4 * psi + 12 * psi / replicas : 8 * psi + 8 * psi / replicas));
    }
  }
}

TEST_CASE("a ZeRO-2 run resumed from its sharded checkpoint continues the uninterrupted curve") {
  auto dir = fs::temp_directory_path() / ("troupe_zero_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream{dir / "zero.yaml"} << dp_graph(2, 2, dp_batch, "checkpoint: {dir: ckpt, every: 10}\n", 64, 2);
  auto run = [&](const std::string& args, const std::string& tag) {
    auto cmd = fmt::format("cd {} && {} run zero.yaml --no-trace --summary-json {}.json {} > {}.txt 2>&1", dir.string(),
                           troupe_exe(), tag, args, tag);
    INFO(slurp(dir / (tag + ".txt")));
    REQUIRE(sh(cmd) == 0);
    return summary_losses(dir / (tag + ".json"));
  };
  auto full = run("--restart", "full");
  REQUIRE(full.size() == dp_steps);
  REQUIRE(fs::exists(dir / "ckpt" / "step-000010" / "r1s0_os.safetensors"));
  auto resumed = run("--resume ckpt/step-000010", "resumed");
  REQUIRE(resumed.size() == dp_steps - 10);
  check_same_curve(resumed, std::vector<double>(full.begin() + 10, full.end()));
  // Without the shards' moments the curve differs: a fresh optimizer state is not the same run.
  fs::remove(dir / "ckpt" / "step-000010" / "r1s0_os.safetensors");
  CHECK(sh(fmt::format("cd {} && {} run zero.yaml --no-trace --resume ckpt/step-000010 > broken.txt 2>&1", dir.string(),
                       troupe_exe())) != 0);
  fs::remove_all(dir);
}
