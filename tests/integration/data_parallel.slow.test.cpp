// Data parallelism through real actors: R replicas of batch b follow the loss
// curve of one replica of batch R·b, in one process and across 2 and 4 (plain
// all-reduce, and ZeRO stages 1 and 2 across 2 processes); a ring peer
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

#include "deploy/run/run_graph.hpp"
#include "ops/gpt.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/trace/trace.hpp"
#include "tests/integration/data_parallel_graph.hpp"
#include "tests/integration/run_trace.hpp"
#include "tests/integration/troupe_process.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr int steps = dp_steps;
constexpr int batch = dp_batch;
constexpr int microbatches = dp_microbatches;

std::string graph_text(int replicas, int stages, int batch_size, const std::string& extra = "", int d_model = 64,
                       int zero = 0) {
  return dp_graph(replicas, stages, batch_size, extra, d_model, zero);
}

run_result run(const std::string& text, std::size_t threads = 0) {
  return run_in_process(text, threads);
}

} // namespace

TEST_CASE("R replicas of batch b follow the loss curve of one replica of batch R*b to 1e-5, with 1 and 2 stages") {
  for (int stages : {1, 2})
    for (int replicas : {2, 4}) {
      CAPTURE(stages);
      CAPTURE(replicas);
      auto one = run(graph_text(1, stages, replicas * batch));
      const auto& ref = one.losses;
      REQUIRE(ref.size() == steps);
      CHECK(ref.back() < ref.front()); // it learns
      auto got = run(graph_text(replicas, stages, batch));
      check_same_curve(got.losses, ref);
      REQUIRE(got.val_loss);
      CHECK(*got.val_loss == doctest::Approx(*one.val_loss).epsilon(1e-5));   // the same validation batches
      CHECK(got.tokens == ref.size() * replicas * batch * microbatches * 32); // the global batch, counted once
      // Replicas of different sizes are not the same run: one replica of batch b differs.
      auto small = run(graph_text(1, stages, batch)).losses;
      CHECK(std::fabs(small.back() - ref.back()) > 1e-4 * std::fabs(ref.back()));
    }
}

TEST_CASE("ZeRO 1 and 2: R replicas of batch b follow one replica of batch R*b to 1e-5, R 2 and 4, 1 and 2 stages") {
  for (int stages : {1, 2})
    for (int replicas : {2, 4}) {
      auto ref = run(graph_text(1, stages, replicas * batch)).losses;
      REQUIRE(ref.size() == steps);
      for (int zero : {1, 2}) {
        CAPTURE(stages);
        CAPTURE(replicas);
        CAPTURE(zero);
        auto got = run(graph_text(replicas, stages, batch, "", 64, zero));
        check_same_curve(got.losses, ref);
        REQUIRE(got.val_loss);
        CHECK(*got.val_loss == doctest::Approx(*run(graph_text(1, stages, replicas * batch)).val_loss).epsilon(1e-5));
      }
    }
}

/// The spans of one in-process run of `text`, and the trace ids of its actors by name.
std::pair<std::vector<span>, std::map<std::string, std::uint16_t>> traced_run(const std::string& text,
                                                                              std::size_t threads = 0) {
  auto t = testing::record_trace([&] { run(text, threads); });
  return {std::move(t.spans), std::move(t.ids)};
}

TEST_CASE("a ring peer sends exactly 2(R-1)/R of its stage's gradient bytes a step") {
  for (int replicas : {2, 4}) {
    CAPTURE(replicas);
    auto [spans, id] = traced_run(graph_text(replicas, 2, batch));
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
    MESSAGE(replicas, " replicas: r0s0_ar sent ", sent_per_step.begin()->second, " bytes a step for ", grad_bytes,
            " gradient bytes");
    for (const auto& [step, bytes] : sent_per_step) {
      CAPTURE(step);
      CHECK(bytes * static_cast<std::uint64_t>(replicas) ==
            static_cast<std::uint64_t>(2 * (replicas - 1) * grad_bytes));
    }
  }
}

namespace {

/// Steps of a traced in-process run whose peer r0s0_ar sent its first ring
/// message before its stage r0s0's last backward of the step ended, and by how
/// many milliseconds on average (negative: after).
std::pair<int, double> overlapped_steps(const std::string& text) {
  auto [spans, id] = traced_run(text, 8);
  std::map<std::int32_t, std::int64_t> first_ring_send, last_backward_end;
  for (const auto& s : spans) {
    if (s.actor == id["r0s0_ar"] && s.kind == span_kind::send)
      first_ring_send[s.step] =
        first_ring_send.contains(s.step) ? std::min(first_ring_send[s.step], s.begin_ns) : s.begin_ns;
    if (s.actor == id["r0s0"] && s.kind == span_kind::backward)
      last_backward_end[s.step] = std::max(last_backward_end[s.step], s.end_ns);
  }
  REQUIRE(first_ring_send.size() == steps);
  int overlapped = 0;
  double lead_ms = 0;
  for (const auto& [step, begin] : first_ring_send) {
    overlapped += begin < last_backward_end[step];
    lead_ms += static_cast<double>(last_backward_end[step] - begin) * 1e-6;
  }
  return {overlapped, lead_ms / steps};
}

} // namespace

TEST_CASE("buckets are reduced while the backward still runs: the peer starts before its stage's last backward ends") {
  // One stage of 4 blocks (d_model 256), 2 replicas, a worker thread for every
  // actor: the first buckets (head, top block) go to the peer mid-backward.
  auto [overlapped, lead_ms] = overlapped_steps(graph_text(2, 1, batch, "", 256));
  MESSAGE(overlapped, " of ", steps, " steps sent their first ring message before the backward ended, on average ",
          lead_ms, " ms before it");
  CHECK(overlapped >= steps / 2);
  // The baseline, every bucket once the step's backward is done, never does.
  auto text = graph_text(2, 1, batch, "", 256);
  text.replace(text.find("bucket: 64KB"), 12, "bucket: 64KB, overlap: false");
  auto [after, lag_ms] = overlapped_steps(text);
  MESSAGE("with overlap: false, ", after, " of ", steps, " steps (first ring message ", -lag_ms,
          " ms after the backward on average)");
  CHECK(after == 0);
}

TEST_CASE(
  "replicas across 2 and 4 processes follow the one-process loss curve of one replica of batch R*b, ZeRO 0 to 2") {
  auto dir = fs::temp_directory_path() / ("troupe_ddp_mp_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  struct config {
    int replicas, stages, nodes, zero;
  };
  // The whole grid: R 2 and 4, 1 and 2 stages, ZeRO 0, 1 and 2, on 2 and 4 processes
  // (but not 4 processes for 2 stage actors: a node would run nothing).
  std::vector<config> grid;
  for (int replicas : {2, 4})
    for (int stages : {1, 2})
      for (int nodes : {2, 4})
        for (int zero : {0, 1, 2})
          if (nodes <= replicas * stages)
            grid.push_back({replicas, stages, nodes, zero});
  for (auto [replicas, stages, nodes, zero] : grid) {
    CAPTURE(replicas);
    CAPTURE(stages);
    CAPTURE(nodes);
    CAPTURE(zero);
    std::ofstream{dir / "ref.yaml"} << graph_text(1, stages, replicas * batch);
    std::ofstream{dir / "ddp.yaml"} << graph_text(replicas, stages, batch,
                                                  fmt::format("cluster: {{nodes: {}}}\n", nodes), 64, zero);
    REQUIRE(sh(troupe_exe() + " run " + (dir / "ref.yaml").string() + " --no-trace --summary-json " +
               (dir / "ref.json").string() + " > /dev/null") == 0);
    REQUIRE(sh(troupe_exe() + " launch " + (dir / "ddp.yaml").string() + " --no-trace --summary-json " +
               (dir / "ddp.json").string() + " > " + (dir / "launch.txt").string() + " 2>&1") == 0);
    INFO(slurp(dir / "launch.txt"));
    check_same_curve(summary_losses(dir / "ddp.json"), summary_losses(dir / "ref.json"));
  }
  fs::remove_all(dir);
}
