// `troupe sim` runs the data-parallel ring's and ZeRO's member code (#25 item
// 6): the bytes each allreduce_peer or optimizer_shard sends under the
// simulated clock are a real run's, actor by actor, with several buckets a
// stage, the loss riding along, bf16 chunks and ZeRO stages 1 and 2.
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/troupe_command.hpp"

using troupe::testing::run_troupe;
namespace fs = std::filesystem;

namespace {

/// A graph file in a temporary folder: 2 replicas of a tiny 2-stage model,
/// `data_parallel` extra keys as given, buckets of 16KB (several a stage).
std::string graph_file(const std::string& name, const std::string& extra) {
  auto dir = fs::temp_directory_path() / fmt::format("troupe_sim_dp_{}", ::getpid());
  fs::create_directories(dir);
  auto path = dir / (name + ".yaml");
  std::ofstream{path} << fmt::format(R"(model:    {{layers: 2, d_model: 32, heads: 2, context: 16, vocab: 256}}
data:     {{corpus: kjv, batch: 2, seed: 5}}
train:    {{steps: 3, lr: 2.0e-3, warmup: 2, eval_every: 0, eval_batches: 1}}
pipeline: {{stages: 2, microbatches: 2, schedule: 1f1b}}
data_parallel: {{replicas: 2, bucket: 16KB{}}}
)",
                                     extra);
  return path.string();
}

} // namespace

TEST_CASE("troupe sim's ring members send a real run's bytes, actor by actor: DDP, bf16 chunks, ZeRO-1 and ZeRO-2") {
  for (auto [name, extra, suffix] : {std::tuple{"ddp", "", "_ar"},
                                     {"bf16", ", wire: bf16", "_ar"},
                                     {"zero1", ", zero: 1", "_os"},
                                     {"zero2", ", zero: 2", "_os"}}) {
    CAPTURE(name);
    auto file = graph_file(name, extra);
    auto summary = file + ".json";
    auto run = run_troupe(fmt::format("run {} --no-trace --summary-json {}", file, summary));
    REQUIRE_MESSAGE(run.code == 0, run.out);
    auto real = nlohmann::json::parse(std::ifstream{summary})["bytes_sent"];
    auto s = run_troupe(fmt::format("sim {} --steps 3 --json", file));
    REQUIRE_MESSAGE(s.code == 0, s.out);
    auto simulated = nlohmann::json::parse(s.out)["data_parallel"]["bytes_by_actor"];
    REQUIRE(simulated.size() == 4);
    for (const auto& [actor, bytes] : simulated.items()) {
      CAPTURE(actor);
      CHECK(actor.ends_with(suffix));
      CHECK(bytes.get<double>() > 0);
      CHECK(real[actor].get<double>() == bytes.get<double>());
    }
  }
}

TEST_CASE("troupe sim's ring crosses the emulated links of its channels, its chunks queued on them") {
  constexpr double bandwidth = 10e6 / 8, latency = 0.05; // 10 Mbit/s, 50 ms
  std::string links = "\nchannels:\n";
  for (int s = 0; s < 2; ++s)
    for (auto [a, b] : {std::pair{0, 1}, {1, 0}})
      links += fmt::format("  - {{from: r{}s{}_ar, to: r{}s{}_ar, bandwidth: 10Mbit/s, latency: 50ms}}\n", a, s, b, s);
  auto file = graph_file("ddp_links", "");
  std::ofstream{file, std::ios::app} << links;
  auto s = run_troupe(fmt::format("sim {} --steps 3 --json", file));
  REQUIRE_MESSAGE(s.code == 0, s.out);
  auto j = nlohmann::json::parse(s.out);
  for (int p = 0; p < 2; ++p) {
    // Each member's chunks leave one after another on its link: a step's bytes
    // over the bandwidth, and the last one's latency, at least.
    const double step_bytes = j["data_parallel"]["bytes_by_actor"][fmt::format("r0s{}_ar", p)].get<double>() / 3;
    const double ring = j["positions"][p]["allreduce_s"].get<double>();
    CHECK(ring >= step_bytes / bandwidth + latency);
    CHECK(ring < step_bytes / bandwidth + 2 * latency * 8); // a few buckets' latencies, not each chunk's
  }
  CHECK(j["sync_wait_s"].get<double>() > 2 * latency);
}
