// The README's main example, run as a user runs it but for 200 of its 2,000
// steps (about 25 s on 2 cores instead of 4-6 minutes): the loss falls, the
// validation loss is printed, the trace is written and the summary line and
// JSON (with the parameter count) come out. deploy/bench/bench_main_example.sh runs
// the full 2,000 steps and prints their timings.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/wait.h>

#include <string>
#include <unistd.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "ops/gpt.hpp"

namespace {

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

} // namespace

TEST_CASE("200 steps of the tiny example lower the loss, validate, trace and summarize the run") {
  const char* build = std::getenv("TROUPE_BUILD_DIR");
  REQUIRE(build);
  auto dir =
    std::filesystem::temp_directory_path() / (std::string{"troupe_tiny_example"} + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto summary = dir / "summary.json", trace = dir / "trace.json", out = dir / "stdout.txt";
  // --timeout makes troupe itself fail past 8 minutes: about 50 s on a quiet 2-core AMD EPYC
  // (250 ms/step), and 2.3x that beside the browser test under `ctest -j2`.
  auto cmd = std::string{build} +
             "/deploy/troupe run examples/tiny-gpt.yaml --steps 200 --set train.eval_every=100 "
             "--set train.warmup=20 --timeout 480 --trace " +
             trace.string() + " --summary-json " + summary.string() + " > " + out.string();
  int status = std::system(cmd.c_str());
  auto text = read(out);
  INFO(text);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);

  auto s = nlohmann::json::parse(read(summary));
  MESSAGE("tiny example, 200 steps: ", s.dump());
  CHECK(s.at("steps").get<int>() == 200);
  const auto& losses = s.at("losses");
  REQUIRE(losses.size() == 200);
  // From ln 256 = 5.55 at the start; 200 steps reach about 2.5 nats per byte.
  CHECK(losses.front().get<double>() > 5.0);
  CHECK(s.at("train_loss").get<double>() < 3.0);
  CHECK(s.at("val_loss").get<double>() < 3.0);
  CHECK(s.at("ms_per_step").get<double>() > 0);

  // The parameter count: the same in the JSON, on the first line and from the model's ranges.
  troupe::ops::gpt_config cfg{.layers = 4, .d_model = 128, .heads = 4, .context = 64, .vocab = 256};
  const auto& p = s.at("parameters");
  CHECK(p.at("total").get<std::int64_t>() == troupe::ops::gpt_parameter_count(cfg, 0, 4));
  CHECK(p.at("per_actor").size() == 4);
  CHECK(p.at("per_actor").at("s1").get<std::int64_t>() == troupe::ops::gpt_parameter_count(cfg, 1, 2));
  CHECK(text.starts_with("parameters: 867,072 (s0 239,232, s1 198,272, s2 198,272, s3 231,296)\n"));

  CHECK(text.find("validation after step 100: loss") != std::string::npos);
  CHECK(text.find("validation after step 200: loss") != std::string::npos);
  CHECK(text.find("examples/tiny-gpt.yaml: 200 steps in ") != std::string::npos);
  auto t = nlohmann::json::parse(read(trace));
  CHECK(t.at("traceEvents").size() > 1000);
  std::filesystem::remove_all(dir);
}
