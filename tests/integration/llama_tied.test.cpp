// Tied embeddings across pipeline stages (#27): the embedding's stage and the
// head's each keep a copy of the tied matrix and add each other's gradient of it
// at every step boundary (actors/boundary/tied_embeddings.cpp). 2 and 4 stages,
// interleaved and V-shaped chunks, attention servers, DDP replicas (routed
// across replicas or not) and ZeRO follow the one-stage curve, where there is
// one matrix, to 1e-5 with clipping on (so the matrix is counted once in the
// norm); the copies stay bit-identical; a resumed run follows the uninterrupted
// one to 1e-6. On SkipPipe's paths stage 0 holds both copies: full paths follow
// tied DDP, and paths that skip keep the copies bit-identical.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "runtime/checkpoint/safetensors.hpp"
#include "tests/integration/run_text.hpp"
#include "tests/integration/troupe_process.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

/// A tied llama over `stages` stages; grad_clip 0.05 binds (counting the matrix twice moves the curve by 7e-5).
std::string graph(int stages, const std::string& pipeline = "schedule: 1f1b", const std::string& extra = "") {
  return fmt::format(
    R"(model: {{family: llama, layers: 4, d_model: 32, heads: 4, kv_heads: 2, context: 16, tie_embeddings: true}}
data: {{corpus: kjv, batch: 4, seed: 3, documents: long_tail}}
train: {{steps: 6, lr: 3.0e-3, warmup: 2, eval_batches: 1, grad_clip: 0.05}}
pipeline: {{stages: {}, microbatches: 4, {}}}
{})",
    stages, pipeline, extra);
}

} // namespace

TEST_CASE("tied llama on 2 and 4 stages, interleaved, V-shaped and with attention servers, follows tied on 1 stage "
          "to 1e-5") {
  auto one = run_graph_text(graph(1, "schedule: gpipe"), "tests/tied1.yaml");
  REQUIRE(one.losses.size() == 6);
  CHECK(one.losses.back() < one.losses.front() - 0.1); // it learns
  for (auto [stages, pipeline, extra] :
       {std::tuple<int, std::string, std::string>{2, "schedule: 1f1b", ""},
        {4, "schedule: 1f1b", ""},
        {2, "schedule: interleaved_1f1b, virtual: 2", ""},
        {2, "schedule: dualpipev, virtual: 2", ""}, // V: both copies on stage 0, added in place
        {2, "schedule: zb_h1", "attention: {servers: in_place, nano_batches: 2}"}}) {
    INFO(stages, " ", pipeline, " ", extra);
    auto got = run_graph_text(graph(stages, pipeline, extra), "tests/tied.yaml");
    auto worst = largest_difference(got.losses, one.losses);
    MESSAGE(fmt::format("{} stages, {} {}: largest relative difference {:.2e}", stages, pipeline, extra, worst));
    CHECK(worst <= 1e-5);
  }
}

// After the ring's sum every replica's copies hold the whole batch's gradient, so
// routes that cross replicas (least_loaded) change nothing either.
TEST_CASE("tied llama on 2 and 4 stages with 2 DDP replicas, routed or not, follows tied on 1 stage with 2 replicas "
          "to 1e-5") {
  const std::string ddp = "data_parallel: {replicas: 2, bucket: 16KB";
  auto one = run_graph_text(graph(1, "schedule: gpipe", ddp + "}"), "tests/tied1_ddp.yaml");
  for (auto [stages, route] : {std::pair<int, std::string>{2, ""}, {4, ""}, {2, ", route: least_loaded"}}) {
    auto got = run_graph_text(graph(stages, "schedule: 1f1b", ddp + route + "}"), "tests/tied_ddp.yaml");
    auto worst = largest_difference(got.losses, one.losses);
    MESSAGE(fmt::format("{} stages x 2 replicas{}: largest relative difference {:.2e}", stages, route, worst));
    CHECK(worst <= 1e-5);
  }
}

// ZeRO: the copies are summed before the shards take them, each in a bucket of
// its own, and the second copy is in no shard's norm.
TEST_CASE("tied llama on 2 and 4 stages with ZeRO-1 and ZeRO-2 over 2 replicas follows tied on 1 stage with the same "
          "ZeRO to 1e-5") {
  for (int zero : {1, 2}) {
    const auto dp = fmt::format("data_parallel: {{replicas: 2, bucket: 16KB, zero: {}}}", zero);
    auto one = run_graph_text(graph(1, "schedule: gpipe", dp), "tests/tied1_zero.yaml");
    for (int stages : {2, 4}) {
      auto got = run_graph_text(graph(stages, "schedule: 1f1b", dp), "tests/tied_zero.yaml");
      auto worst = largest_difference(got.losses, one.losses);
      MESSAGE(fmt::format("{} stages x 2 replicas, ZeRO-{}: largest relative difference {:.2e}", stages, zero, worst));
      CHECK(worst <= 1e-5);
    }
  }
}

// Under ZeRO-2 a stage's gradients are given back at each step boundary and
// come again with its first backward. Slow middle stages under GPipe make the
// head's stage finish a step (and send its gradient of the matrix) before the
// embedding's stage has run a backward of it: the gradient must wait there
// (it failed the run, "no gradient ... to exchange", when it came first).
TEST_CASE("under ZeRO-2 the head's gradient of the tied matrix may arrive before the embedding stage's first "
          "backward of the step") {
  const std::string dp = "data_parallel: {replicas: 2, bucket: 16KB, zero: 2}";
  auto one = run_graph_text(graph(1, "schedule: gpipe", dp), "tests/tied1_zero2.yaml");
  std::string slow = dp + "\nactors:\n";
  for (const auto* name : {"r0s1", "r0s2", "r1s1", "r1s2"})
    slow += fmt::format("  - {{name: {}, slowdown: 4}}\n", name);
  auto got = run_graph_text(graph(4, "schedule: gpipe", slow), "tests/tied_zero2_slow.yaml");
  auto worst = largest_difference(got.losses, one.losses);
  MESSAGE(
    fmt::format("4 stages x 2 replicas, ZeRO-2, middle stages 4x slow: largest relative difference {:.2e}", worst));
  CHECK(worst <= 1e-5);
}

TEST_CASE("under ZeRO over 3 replicas the tied matrix's copies are bit-identical in every replica's checkpoint") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("troupe-tied-zero-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "tied.yaml") << graph(2, "schedule: 1f1b", "data_parallel: {replicas: 3, bucket: 16KB, zero: 1}");
  auto ck = dir / "ck";
  REQUIRE(run_to_end(dir, {"run", (dir / "tied.yaml").string(), "--no-trace", "--set", "train.steps=4", "--set",
                           "checkpoint.dir=" + ck.string(), "--set", "checkpoint.every=4"}) == 0);
  auto embedding = read_safetensors(ck / "step-000004" / "r0s0.safetensors");
  REQUIRE(embedding);
  auto want = embedding->find("embed_tokens.weight");
  REQUIRE(want.defined());
  for (const auto* part : {"r0s0", "r1s0", "r2s0", "r0s1", "r1s1", "r2s1"}) {
    auto f = read_safetensors(ck / "step-000004" / (std::string(part) + ".safetensors"));
    REQUIRE_MESSAGE(f, part);
    auto got = f->find(std::string(part).ends_with("s1") ? "lm_head.weight" : "embed_tokens.weight");
    REQUIRE_MESSAGE(got.defined(), part);
    CHECK_MESSAGE(std::memcmp(got.raw(), want.raw(), want.nbytes()) == 0, part);
  }
  fs::remove_all(dir);
}

TEST_CASE("the tied matrix's copies are bit-identical in the checkpoint, and a resumed tied run follows the "
          "uninterrupted one to 1e-6") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("troupe-tied-ck-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "tied.yaml") << graph(2, "schedule: 1f1b", "data_parallel: {replicas: 2, bucket: 16KB}");
  auto run = [&](std::vector<std::string> extra, const std::string& name) {
    std::vector<std::string> args{"run",
                                  (dir / "tied.yaml").string(),
                                  "--no-trace",
                                  "--summary-json",
                                  (dir / (name + ".json")).string(),
                                  "--set",
                                  "train.steps=4"};
    args.insert(args.end(), extra.begin(), extra.end());
    REQUIRE(run_to_end(dir, args) == 0);
    return summary_losses(dir / (name + ".json"));
  };
  auto ck = dir / "ck"; // steps 2 and 4 (checkpoint.keep: 2)
  auto straight = run({"--set", "checkpoint.dir=" + ck.string(), "--set", "checkpoint.every=2"}, "straight");
  { // every replica's two copies, parameters and AdamW's moments, after 4 steps
    auto read = [&](const char* part) {
      auto f = read_safetensors(ck / "step-000004" / (std::string(part) + ".safetensors"));
      REQUIRE_MESSAGE(f, part);
      return std::move(*f);
    };
    auto first = read("r0s0");
    auto embedding = first.find("embed_tokens.weight");
    REQUIRE(embedding.defined());
    int compared = 0;
    for (const auto* part : {"r0s0", "r0s1", "r1s0", "r1s1"}) {
      auto f = read(part);
      bool head = std::string(part).ends_with("s1");
      for (const char* kind : {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."}) {
        auto want = first.find(std::string(kind) + "embed_tokens.weight");
        auto got = f.find(std::string(kind) + (head ? "lm_head.weight" : "embed_tokens.weight"));
        REQUIRE_MESSAGE(got.defined(), part, " ", kind);
        REQUIRE(got.nbytes() == want.nbytes());
        CHECK_MESSAGE(std::memcmp(got.raw(), want.raw(), want.nbytes()) == 0, part, " ", kind);
        ++compared;
      }
    }
    CHECK(compared == 12);
  }
  auto resumed = run({"--resume", (ck / "step-000002").string()}, "resumed");
  REQUIRE(resumed.size() == 2); // steps 3 and 4
  double worst = 0;
  for (std::size_t i = 0; i < 2; ++i)
    worst = std::max(worst, std::fabs(resumed[i] - straight[i + 2]) / std::fabs(straight[i + 2]));
  MESSAGE(fmt::format("resumed against uninterrupted: largest relative difference {:.2e}", worst));
  CHECK(worst <= 1e-6);
  fs::remove_all(dir);
}

// SkipPipe: every path starts and ends on one stage 0, which holds the embedding
// and the head as two chunks ([0, k) and [L, L)), so a microbatch's embedding and
// head are always on one actor and its copies are added in place, after the ring's
// sum over the replicas. Full paths must equal DDP without skip.
TEST_CASE("tied llama on SkipPipe's paths: full paths follow tied DDP, and skipping paths keep the copies "
          "bit-identical") {
  const std::string net = "data_parallel: {replicas: 2}\n"
                          "network:\n  locations: [a, b]\n"
                          "  links:\n    - {between: [a, b], latency: 0ms, bandwidth: 10GB/s}\n"
                          "  within_location: {latency: 0ms, bandwidth: 10GB/s}\n"
                          "  nodes: [a, a, a, a, b, b, b, b]\n";
  auto ddp = run_graph_text(graph(4, "schedule: gpipe", "data_parallel: {replicas: 2}"), "tests/tied_ddp4.yaml");
  auto full = run_graph_text(graph(4, "schedule: gpipe", net + "skip: {path_length: 4, memory: 8, planner: full}"),
                             "tests/tied_skip_full.yaml");
  auto worst = largest_difference(full.losses, ddp.losses);
  CHECK(worst <= 1e-5);
  const fs::path dir = fs::temp_directory_path() / fmt::format("troupe-tied-skip-{}", ::getpid());
  fs::remove_all(dir);
  auto skipping = run_graph_text(
    graph(4, "schedule: gpipe",
          net + "skip: {path_length: 3, memory: 3}\n" + fmt::format("checkpoint: {{dir: {}, every: 6}}", dir.string())),
    "tests/tied_skip.yaml");
  CHECK(skipping.losses.back() < skipping.losses.front() - 0.1);
  for (const auto* part : {"r0s0", "r1s0"}) {
    auto f = read_safetensors(dir / "step-000006" / (std::string(part) + ".safetensors"));
    REQUIRE_MESSAGE(f, part);
    for (std::string kind : {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."}) {
      auto e = f->find(kind + "embed_tokens.weight"), h = f->find(kind + "lm_head.weight");
      REQUIRE_MESSAGE(e.defined(), part, " ", kind);
      REQUIRE_MESSAGE(h.defined(), part, " ", kind);
      CHECK_MESSAGE(std::memcmp(e.raw(), h.raw(), e.nbytes()) == 0, part, " ", kind);
    }
  }
  fs::remove_all(dir);
  MESSAGE(fmt::format("tied SkipPipe, full paths against DDP: {:.2e}; paths of 3 of 4 stages: loss {:.4f} -> {:.4f}",
                      worst, skipping.losses.front(), skipping.losses.back()));
}
