// A DDP run cannot go on without one of its replicas: killing the node process
// that holds replica 1 ends `troupe launch` within 5 seconds with exit 1,
// naming the lost node and the actors it ran (its stages and their ring peers).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include "tests/integration/troupe_process.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace troupe::testing;

TEST_CASE("killing the node of a DDP replica ends the launch within 5 seconds with exit 1, naming its actors") {
  auto dir = fs::temp_directory_path() / ("troupe_ddp_kill_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Two replicas of a 2-stage pipeline, one replica per node process.
  std::ofstream{dir / "graph.yaml"} << "model: {layers: 4, d_model: 32, heads: 2, context: 16, vocab: 256}\n"
                                    << "data: {corpus: kjv, batch: 4, seed: 7}\n"
                                    << "train: {steps: 100000, lr: 3.0e-3, warmup: 2, eval_batches: 2}\n"
                                    << "pipeline: {stages: 2, microbatches: 4, schedule: 1f1b}\n"
                                    << "data_parallel: {replicas: 2, bucket: 64KB}\n"
                                    << "cluster: {launcher: local, nodes: 2}\n";
  troupe_process launch{dir, {"launch", (dir / "graph.yaml").string()}};
  auto coordinator = launch.wait_for(R"(coordinator on (127\.0\.0\.1:\d+))");
  launch.wait_for(R"(step\s+\d+/100000)"); // training, with the all-reduce between the nodes, is under way
  std::this_thread::sleep_for(300ms);      // mid-run: some steps in, a ring likely in flight
  auto [code, took, err] = kill_node(launch, coordinator, 1);
  MESSAGE("the launch ended " << took << " s after the kill with exit code " << code << ": " << err);
  CHECK(code == 1);
  CHECK(took < 5.0);
  CHECK(err.find("lost node 1") != std::string::npos);
  for (const char* actor : {"r1s0", "r1s1", "r1s0_ar", "r1s1_ar"})
    CHECK(err.find(actor) != std::string::npos);
  CHECK(err.find("r0s0,") == std::string::npos); // the survivors are not named as lost
  std::this_thread::sleep_for(200ms);
  CHECK(processes_with("--coordinator " + coordinator).empty());
  fs::remove_all(dir);
}
