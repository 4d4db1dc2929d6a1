// Data parallelism through real actors: R replicas of batch b follow the loss
// curve of one replica of batch R·b, in one process and across two; a ring peer
// sends 2(R-1)/R of its stage's gradient bytes a step; buckets are reduced
// while the backward still runs (seen in the trace's timestamps).
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "deploy/cli/run_graph.hpp"
#include "ops/gpt.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/trace/trace.hpp"
#include "tests/integration/troupe_process.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr int steps = 20;
constexpr int microbatches = 2;
constexpr int batch = 2;  ///< per replica

std::string graph_text(int replicas, int stages, int batch_size, const std::string& extra = "") {
  return fmt::format(R"(model:    {{layers: 4, d_model: 64, heads: 2, context: 32, vocab: 256}}
data:     {{corpus: kjv, batch: {}, seed: 5}}
train:    {{steps: {}, lr: 2.0e-3, weight_decay: 0.1, warmup: 5, eval_batches: 2}}
pipeline: {{stages: {}, microbatches: {}, schedule: 1f1b}}
{}{})",
                     batch_size, steps, stages, microbatches,
                     replicas > 1 ? fmt::format("data_parallel: {{replicas: {}, bucket: 64KB}}\n", replicas) : "",
                     extra);
}

run_result run(const std::string& text) {
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  auto loaded = load_graph_text(text, "ddp.yaml", opts);
  INFO(to_string(loaded.errors));
  REQUIRE(loaded.ok());
  troupe_config cfg;
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, *loaded.graph);
  INFO(text, r ? std::string{} : sys.render(r.error()));
  REQUIRE(r);
  return *r;
}

void check_same_curve(const std::vector<double>& got, const std::vector<double>& ref) {
  REQUIRE(got.size() == ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(got[i] - ref[i]) <= 1e-5 * std::fabs(ref[i]));
  }
}

} // namespace

TEST_CASE("R replicas of batch b follow the loss curve of one replica of batch R*b to 1e-5, with 1 and 2 stages") {
  for (int stages : {1, 2})
    for (int replicas : {2, 4}) {
      CAPTURE(stages);
      CAPTURE(replicas);
      auto ref = run(graph_text(1, stages, replicas * batch)).losses;
      REQUIRE(ref.size() == steps);
      CHECK(ref.back() < ref.front()); // it learns
      auto got = run(graph_text(replicas, stages, batch));
      check_same_curve(got.losses, ref);
      CHECK(got.tokens == ref.size() * replicas * batch * microbatches * 32); // the global batch, counted once
      // Replicas of different sizes are not the same run: one replica of batch b differs.
      auto small = run(graph_text(1, stages, batch)).losses;
      CHECK(std::fabs(small.back() - ref.back()) > 1e-4 * std::fabs(ref.back()));
    }
}

TEST_CASE("a ring peer sends 2(R-1)/R of its stage's gradient bytes a step, and buckets are reduced during the backward") {
  for (int replicas : {2, 4}) {
    CAPTURE(replicas);
    auto& tr = trace_recorder::global();
    tr.reset();
    tr.enable(1 << 18);
    run(graph_text(replicas, 2, batch));
    tr.disable();
    trace_recorder::cursor cur;
    std::vector<span> spans;
    tr.collect(cur, spans);
    std::map<std::string, std::uint16_t> id;
    for (const auto& a : tr.actors())
      id[a.name] = a.id;
    REQUIRE(id.contains("r0s0_ar"));
    // Stage 0 holds the embeddings and blocks 0-1 (d_model 64, context 32): every
    // tensor's size is a multiple of 4 values, so no bucket needs padding.
    ops::gpt_config cfg{4, 64, 2, 32, 256};
    auto grad_bytes = ops::gpt_parameter_count(cfg, 0, 2) * 4;
    std::map<std::int32_t, std::uint64_t> sent_per_step;
    for (const auto& s : spans)
      if (s.actor == id["r0s0_ar"] && s.kind == span_kind::send)
        sent_per_step[s.step] += s.bytes;
    REQUIRE(sent_per_step.size() == steps);
    for (const auto& [step, bytes] : sent_per_step) {
      CAPTURE(step);
      CHECK(bytes * static_cast<std::uint64_t>(replicas) ==
            static_cast<std::uint64_t>(2 * (replicas - 1) * grad_bytes));
    }
    // Overlap: the peer takes its first bucket of a step (a sync span begins)
    // before its stage's last backward of that step ends.
    std::map<std::int32_t, std::int64_t> first_sync, last_backward_end;
    for (const auto& s : spans) {
      if (s.actor == id["r0s0_ar"] && s.kind == span_kind::sync)
        first_sync[s.step] = first_sync.contains(s.step) ? std::min(first_sync[s.step], s.begin_ns) : s.begin_ns;
      if (s.actor == id["r0s0"] && s.kind == span_kind::backward)
        last_backward_end[s.step] = std::max(last_backward_end[s.step], s.end_ns);
    }
    int overlapped = 0;
    for (const auto& [step, begin] : first_sync)
      overlapped += begin < last_backward_end[step];
    MESSAGE(replicas, " replicas: ", overlapped, " of ", first_sync.size(),
            " steps began reducing a bucket before the backward ended");
    CHECK(first_sync.size() == steps);
    CHECK(overlapped >= steps * 3 / 4);
  }
}

TEST_CASE("2 replicas across 2 processes follow the one-process loss curve of one replica of batch 2b") {
  auto dir = fs::temp_directory_path() / ("troupe_ddp_mp_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (int stages : {1, 2}) {
    CAPTURE(stages);
    std::ofstream{dir / "ref.yaml"} << graph_text(1, stages, 2 * batch);
    std::ofstream{dir / "ddp.yaml"} << graph_text(2, stages, batch, "cluster: {nodes: 2}\n");
    REQUIRE(sh(troupe_exe() + " run " + (dir / "ref.yaml").string() + " --no-trace --summary-json " +
               (dir / "ref.json").string() + " > /dev/null") == 0);
    REQUIRE(sh(troupe_exe() + " launch " + (dir / "ddp.yaml").string() + " --no-trace --summary-json " +
               (dir / "ddp.json").string() + " > " + (dir / "launch.txt").string() + " 2>&1") == 0);
    INFO(slurp(dir / "launch.txt"));
    check_same_curve(summary_losses(dir / "ddp.json"), summary_losses(dir / "ref.json"));
  }
  fs::remove_all(dir);
}
