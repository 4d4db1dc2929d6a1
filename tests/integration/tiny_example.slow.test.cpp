// The README's main example, run as a user runs it: the tiny GPT through 4
// pipeline stages must bring the validation loss under 2 nats per byte.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <sys/wait.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

TEST_CASE("the tiny example trains to a validation loss under 2.0 nats per byte within 10 minutes") {
  const char* build = std::getenv("TROUPE_BUILD_DIR");
  REQUIRE(build);
  auto summary = std::filesystem::temp_directory_path() / "troupe_tiny_summary.json";
  // --timeout makes troupe itself fail past 10 minutes; no trace file is left in the tree.
  auto cmd = std::string{build} + "/deploy/troupe run examples/tiny-gpt.yaml --no-trace --timeout 600 --summary-json " +
             summary.string() + " > /dev/null";
  int status = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  std::ifstream in(summary);
  auto s = nlohmann::json::parse(in);
  MESSAGE("tiny example: ", s.dump());
  CHECK(s.at("steps").get<int>() == 2000);
  CHECK(s.at("val_loss").get<double>() < 2.0);
  CHECK(s.at("ms_per_step").get<double>() * 2000 < 600'000);
}
