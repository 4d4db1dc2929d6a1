// `troupe sim` prices what a local-update graph runs (#25 item 6): outer steps
// every H steps, fragments, compression and the emulated links between the
// outer_sync actors, by running their peer code under the simulated clock; a
// straggler's slowdown and least_loaded routing likewise.
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

constexpr double bandwidth = 10e6 / 8, latency = 0.05; // 10 Mbit/s, 50 ms

/// A graph file in a temporary folder: 2 replicas of a tiny `stages`-stage
/// model, `local_update` as given, every outer_sync pair on an emulated link.
std::string graph_file(const std::string& local_update, int stages = 2, int steps = 8) {
  static int n = 0;
  auto dir = fs::temp_directory_path() / fmt::format("troupe_sim_lu_{}", ::getpid());
  fs::create_directories(dir);
  auto path = dir / fmt::format("g{}.yaml", n++);
  std::ofstream out{path};
  out << fmt::format(R"(model:    {{layers: 2, d_model: 32, heads: 2, context: 16, vocab: 256}}
data:     {{corpus: kjv, batch: 2, seed: 5}}
train:    {{steps: {}, lr: 2.0e-3, warmup: 2, eval_every: 0, eval_batches: 1}}
pipeline: {{stages: {}, microbatches: 2, schedule: 1f1b}}
data_parallel: {{replicas: 2}}
local_update: {}
channels:
)",
                     steps, stages, local_update);
  for (int s = 0; s < stages; ++s)
    for (auto [a, b] : {std::pair{0, 1}, {1, 0}})
      out << fmt::format("  - {{from: r{}s{}_sync, to: r{}s{}_sync, bandwidth: 10Mbit/s, latency: 50ms}}\n", a, s, b,
                         s);
  return path.string();
}

nlohmann::json sim(const std::string& file, int steps = 8) {
  auto r = run_troupe(fmt::format("sim {} --steps {} --json", file, steps));
  REQUIRE_MESSAGE(r.code == 0, r.out);
  return nlohmann::json::parse(r.out);
}

double bytes_of(const nlohmann::json& j) {
  return j["local_update"]["bytes"].get<double>();
}

} // namespace

TEST_CASE("troupe sim of DiLoCo exchanges every H steps: H = 1 and H = 8 over 8 steps, 8 times the bytes and waits") {
  auto every = sim(graph_file("{algorithm: diloco, sync_every: 1}"));
  auto once = sim(graph_file("{algorithm: diloco, sync_every: 8}"));
  CHECK(every["local_update"]["exchanges"] == 8);
  CHECK(once["local_update"]["exchanges"] == 1);
  CHECK(bytes_of(every) == doctest::Approx(8 * bytes_of(once)).epsilon(1e-12));
  // Each exchange stops the stages for about the same time, so the run is 7 of them longer.
  double wait = once["local_update"]["wait_s"].get<double>();
  CHECK(wait > 2 * latency);
  CHECK(every["local_update"]["wait_s"].get<double>() == doctest::Approx(wait).epsilon(0.05));
  double longer = (every["iteration_s"].get<double>() - once["iteration_s"].get<double>()) * 8;
  CHECK(longer == doctest::Approx(7 * wait).epsilon(0.1));
  auto text = run_troupe("sim " + graph_file("{algorithm: diloco, sync_every: 4}") + " --steps 8");
  CHECK(text.code == 0);
  CHECK(text.has("local_update diloco: 2 outer steps a stage"));
}

TEST_CASE("troupe sim of an exchange is the hand computation: two latencies and the fragment over the link") {
  // One stage per replica: each outer_sync sends the other's half of its
  // fragment (round 0), then the mean of its own half (round 1), 4n bytes in
  // all; on average over the two an exchange takes 2 latencies + 4n / bandwidth.
  auto j = sim(graph_file("{algorithm: diloco, sync_every: 4}", 1));
  const auto& lu = j["local_update"];
  REQUIRE(lu["exchanges"] == 2);
  double per_member = lu["bytes_by_actor"]["r0s0_sync"].get<double>() / 2;
  CHECK(lu["bytes_by_actor"]["r1s0_sync"].get<double>() / 2 == per_member);
  CHECK(lu["exchange_s"].get<double>() == doctest::Approx(2 * latency + per_member / bandwidth).epsilon(0.005));
}

TEST_CASE("troupe sim exchanges a stage too large to hold as a smaller one: still 4 bytes a parameter per member") {
  // 2 layers of d_model 1536: about 57M parameters, over the 4M values a peer holds.
  auto j = sim(graph_file("{algorithm: diloco, sync_every: 4}") + " --set model.d_model=1536 --set model.heads=12", 4);
  const auto& lu = j["local_update"];
  REQUIRE(lu["exchanges"] == 1);
  double replica0 = lu["bytes_by_actor"]["r0s0_sync"].get<double>() + lu["bytes_by_actor"]["r0s1_sync"].get<double>();
  CHECK(replica0 == doctest::Approx(4 * j["params_b"].get<double>() * 1e9).epsilon(0.01));
  CHECK(lu["exchange_s"].get<double>() > replica0 / 2 / bandwidth); // each position's half of it, at least
}

TEST_CASE("troupe sim sends what the method's wire format sends: bf16 half of f32, int8 a quarter and a scale per "
          "row, P fragments each 1/P of the stage") {
  auto f32 = bytes_of(sim(graph_file("{algorithm: diloco, sync_every: 4}")));
  auto bf16 = bytes_of(sim(graph_file("{algorithm: diloco, sync_every: 4, quantize: bf16}")));
  auto int8 = bytes_of(sim(graph_file("{algorithm: diloco, sync_every: 4, quantize: int8}")));
  CHECK(bf16 == doctest::Approx(f32 / 2).epsilon(1e-12));
  CHECK(int8 > f32 / 4);
  CHECK(int8 == doctest::Approx(f32 / 4 * (1 + 4.0 / 1024)).epsilon(0.02)); // a 4-byte scale per 1024 values
  auto streaming = sim(graph_file("{algorithm: streaming_diloco, sync_every: 4, fragments: 2, delay: 1}"));
  CHECK(streaming["local_update"]["exchanges"] == 4);               // a fragment every H / P steps
  CHECK(bytes_of(streaming) == doctest::Approx(f32).epsilon(0.01)); // each the half of the stage it holds
  auto sparse = bytes_of(sim(graph_file("{algorithm: sparseloco, sync_every: 4, density: 0.05}")));
  CHECK(sparse < f32 / 10);
}

TEST_CASE("troupe sim's outer_sync bytes are a real run's, actor by actor") {
  for (const char* lu : {"{algorithm: diloco, sync_every: 3}",
                         "{algorithm: streaming_diloco, sync_every: 4, fragments: 2, delay: 1, quantize: int8}"}) {
    CAPTURE(lu);
    auto file = graph_file(lu);
    auto summary = file + ".json";
    auto run = run_troupe(fmt::format("run {} --no-trace --summary-json {}", file, summary));
    REQUIRE_MESSAGE(run.code == 0, run.out);
    auto real = nlohmann::json::parse(std::ifstream{summary})["bytes_sent"];
    auto simulated = sim(file)["local_update"]["bytes_by_actor"];
    REQUIRE(simulated.size() == 4);
    for (const auto& [actor, bytes] : simulated.items()) {
      CAPTURE(actor);
      CHECK(real[actor].get<double>() == bytes.get<double>());
    }
  }
}

TEST_CASE("troupe sim prices a straggler's slowdown and least_loaded routing around it") {
  auto file = [](const std::string& route, int slowdown) {
    auto dir = fs::temp_directory_path() / fmt::format("troupe_sim_ll_{}", ::getpid());
    fs::create_directories(dir);
    auto path = dir / fmt::format("{}{}.yaml", route, slowdown);
    std::ofstream{path} << fmt::format(R"(model:    {{layers: 4, d_model: 128, heads: 4, context: 64, vocab: 256}}
data:     {{corpus: kjv, batch: 4, seed: 3}}
train:    {{steps: 4, lr: 1.0e-3, warmup: 2, eval_batches: 1}}
pipeline: {{stages: 2, microbatches: 16, schedule: 1f1b}}
data_parallel: {{replicas: 2, route: {}}}
actors:
  - {{name: r1s1, slowdown: {}}}
)",
                                       route, slowdown);
    return path.string();
  };
  auto plain = sim(file("own", 1), 4);
  auto own = sim(file("own", 3), 4);
  auto least = sim(file("least_loaded", 3), 4);
  CHECK(own["iteration_s"].get<double>() > 1.5 * plain["iteration_s"].get<double>()); // the straggler is priced
  CHECK(least["iteration_s"].get<double>() < 0.9 * own["iteration_s"].get<double>()); // and routed around
}

TEST_CASE("troupe sim runs NoLoCo's groups on chains and refuses its random routes, and skip paths, at their key") {
  auto chain = sim(graph_file("{algorithm: noloco, sync_every: 4, route: chain}"));
  CHECK(chain["local_update"]["exchanges"] == 2);
  CHECK(bytes_of(chain) > 0);
  auto file = graph_file("{algorithm: noloco, sync_every: 4}");
  auto random = run_troupe("sim " + file);
  CHECK(random.code == 2);
  CHECK(random.has(file + ":6:"));
  CHECK(random.has("local_update.route: noloco's activations to other replicas' stages"));
  auto skip = run_troupe("sim examples/skippipe-run.yaml --set local_update.algorithm=diloco");
  CHECK(skip.code == 2); // SkipPipe's paths are simulated without the exchanges: refused, not ignored
  CHECK(skip.has("local_update: local-update training beside skip paths is not priced"));
}
