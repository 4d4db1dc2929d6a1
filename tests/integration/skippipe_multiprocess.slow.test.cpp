// SkipPipe's planned paths across node processes (#25 item 4): the paths cross
// replicas at every hop, so each one is a route of channels between nodes; a
// launched run must give the one-process run's losses.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/troupe_process.hpp"
#include "tests/troupe_command.hpp"

using namespace troupe::testing;
namespace fs = std::filesystem;

namespace {

/// 4 positions × 2 replicas, paths of 3 of the 4 stages planned over 8 network nodes.
const std::string skip_graph = R"(model:    {layers: 8, d_model: 32, heads: 2, context: 16, vocab: 256}
data:     {corpus: kjv, batch: 2, seed: 5}
train:    {steps: 6, lr: 2.0e-3, warmup: 2, eval_batches: 1}
pipeline: {stages: 4, microbatches: 4, schedule: gpipe}
data_parallel: {replicas: 2}
network:
  locations: [a, b, c]
  links:
    - {between: [a, b], latency: 1ms, bandwidth: 1GB/s}
    - {between: [a, c], latency: 8ms, bandwidth: 100MB/s}
    - {between: [b, c], latency: 2ms, bandwidth: 1GB/s}
  within_location: {latency: 0ms, bandwidth: 10GB/s}
  nodes: [a, a, b, b, c, c, a, b]
sim: {device: a100_80gb}
skip: {path_length: 3, memory: 3}
)";

} // namespace

TEST_CASE("SkipPipe's paths launched over two node processes give the one-process losses") {
  auto dir = fs::temp_directory_path() / fmt::format("troupe_skip_mp_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "one.yaml") << skip_graph;
  std::ofstream(dir / "two.yaml") << "cluster: {launcher: local, nodes: 2}\n" << skip_graph;
  auto one = run_troupe("run " + (dir / "one.yaml").string() + " --no-trace --summary-json " +
                        (dir / "one.json").string());
  INFO(one.out);
  REQUIRE(one.code == 0);
  auto two = run_troupe("launch " + (dir / "two.yaml").string() + " --no-trace --summary-json " +
                        (dir / "two.json").string());
  INFO(two.out);
  REQUIRE(two.code == 0);
  CHECK(two.has("validation on a path of 3 of 4 stages")); // the paths ran, not the full pipeline
  auto a = summary_losses(dir / "one.json"), b = summary_losses(dir / "two.json");
  REQUIRE(a.size() == 6);
  REQUIRE(b.size() == a.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    CHECK(std::fabs(b[i] - a[i]) <= 1e-6 * std::fabs(a[i]));
  fs::remove_all(dir);
}
