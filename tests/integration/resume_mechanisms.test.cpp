// Exact resume with the mechanisms whose state lies beyond the stages' weights
// (#25 item 4): attention servers (the loader's rounds), least_loaded routing
// (its routes follow the stages' loads), SkipPipe's paths (planned once, at the
// start) and zb_h1 with attention servers. Each run saves every 3 steps; resumed
// from step 3 it gives the uninterrupted run's losses to 1e-6. (Local-update
// outer state: local_update_resume.test.cpp; ZeRO's shards: zero.test.cpp.)
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/integration/skip_network.hpp"
#include "tests/troupe_command.hpp"

namespace fs = std::filesystem;
using troupe::testing::run_troupe;

namespace {

std::string graph(const std::string& schedule, const std::string& data, const std::string& extra, int stages,
                  const fs::path& ck) {
  return fmt::format(R"(model:    {{layers: 4, d_model: 32, heads: 2, context: 32, vocab: 256}}
data:     {{corpus: kjv, batch: 4, seed: 3{}}}
train:    {{steps: 6, lr: 2.0e-3, warmup: 2, eval_batches: 1}}
pipeline: {{stages: {}, microbatches: 4, schedule: {}}}
checkpoint: {{dir: {}, every: 3}}
{})",
                     data, stages, schedule, ck.string(), extra);
}

std::vector<double> losses(const fs::path& summary) {
  return nlohmann::json::parse(std::ifstream(summary))["losses"].get<std::vector<double>>();
}

void check_resumes(const std::string& name, const std::string& text) {
  CAPTURE(name);
  auto dir = fs::temp_directory_path() / fmt::format("troupe-resume-{}-{}", name, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto file = dir / "g.yaml";
  std::ofstream(file) << text;
  auto full =
    run_troupe(fmt::format("run {} --no-trace --summary-json {}", file.string(), (dir / "full.json").string()));
  REQUIRE_MESSAGE(full.code == 0, full.out);
  auto resumed = run_troupe(fmt::format("run {} --no-trace --resume {} --summary-json {}", file.string(),
                                        (dir / "ck" / "step-000003").string(), (dir / "resumed.json").string()));
  REQUIRE_MESSAGE(resumed.code == 0, resumed.out);
  auto want = losses(dir / "full.json"), got = losses(dir / "resumed.json");
  REQUIRE(want.size() == 6);
  REQUIRE(got.size() == 3);
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got[i] - want[i + 3]) <= 1e-6 * want[i + 3]);
  }
  fs::remove_all(dir);
}

fs::path ck_of(const std::string& name) {
  return fs::temp_directory_path() / fmt::format("troupe-resume-{}-{}", name, ::getpid()) / "ck";
}

} // namespace

TEST_CASE(
  "attention servers, least_loaded, SkipPipe paths and zb_h1 with servers resume onto the uninterrupted curve") {
  const std::string replicas = "data_parallel: {replicas: 2, bucket: 16KB}\n";
  check_resumes("attention",
                graph("1f1b", ", documents: long_tail", replicas + "attention: {servers: in_place, nano_batches: 2}", 2,
                      ck_of("attention")));
  check_resumes("attention_zb", graph("zb_h1", ", documents: long_tail", replicas + "attention: {servers: 2}", 2,
                                      ck_of("attention_zb")));
  check_resumes("least_loaded", graph("1f1b", "", "data_parallel: {replicas: 2, bucket: 16KB, route: least_loaded}", 2,
                                      ck_of("least_loaded")));
  check_resumes("skip", graph("gpipe", "",
                              "data_parallel: {replicas: 2}\n" + troupe::testing::skip_network8 +
                                "skip: {path_length: 3, memory: 3}",
                              4, ck_of("skip")));
}
