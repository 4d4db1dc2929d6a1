// A stage asked onto a GPU that is not there stops `troupe run` at spawn with
// exit code 1 and the actor, the device and CUDA's reason, before any step.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "actors/stage/stage_model.hpp"
#include "runtime/actor/errors.hpp"

using namespace troupe;

TEST_CASE("a cuda stage on a machine without a GPU fails at spawn naming the actor, device and reason") {
  // What the CUDA backend says about this machine (or that it was not built).
  std::string reason;
  if (auto b = stage_model_backend_for(device::kind_t::cuda); !b) {
    reason = error_message(b.error());
  } else if (auto n = b->devices(); !n) {
    reason = error_message(n.error());
  } else if (*n == 0) {
    reason = "no CUDA device is available (cudaGetDeviceCount: 0 devices)";
  } else {
    MESSAGE("a GPU is present: the no-GPU error cannot be provoked here");
    return;
  }
  const char* build = std::getenv("TROUPE_BUILD_DIR");
  REQUIRE(build);
  auto dir = std::filesystem::temp_directory_path() / fmt::format("troupe_device_{}", ::getpid());
  std::filesystem::create_directories(dir);
  auto graph = dir / "gpu.yaml";
  std::ofstream(graph) << "model:    {layers: 2, d_model: 32, heads: 2, context: 16}\n"
                          "data:     {corpus: kjv, batch: 2}\n"
                          "train:    {steps: 2}\n"
                          "pipeline: {stages: 2, microbatches: 2}\n"
                          "actors:\n  - {name: s1, device: 'cuda:0'}\n";
  auto out = dir / "out.txt";
  // The graph names `kjv`: run from the source tree, where data/ is found.
  auto cmd = fmt::format("{}/deploy/troupe run {} --no-trace > {} 2>&1", build, graph.string(), out.string());
  int status = std::system(cmd.c_str());
  std::stringstream text;
  text << std::ifstream(out).rdbuf();
  std::filesystem::remove_all(dir);
  INFO(text.str());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(text.str().find(fmt::format("actor 's1' (pipeline_stage): device cuda:0 requested but {}", reason)) !=
        std::string::npos);
  CHECK(text.str().find("step ") == std::string::npos); // nothing ran
}
