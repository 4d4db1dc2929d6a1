// Local-update training is elastic (#13): killing the node process that holds
// replica 1 mid-run, the launch names the lost replica, its sync actors re-form
// their exchanges without it, the loader deals its microbatches to the
// replicas left (or, with `batch_on_loss: shrink`, stops making them), and
// the run finishes every step with exit 0, for DiLoCo and for NoLoCo. (DDP
// still stops: integration.data_parallel_kill.) With 3 replicas the two left
// must agree bit for bit after the last outer step: their parameters, saved
// globals and outer momentum (#26 item 3), whenever in the exchange the kill
// fell. (Not the inner AdamW moments: each replica keeps its own.)
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/same_tensors.hpp"
#include "tests/integration/troupe_process.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace troupe::testing;

namespace {

/// `shrink`: the graph sets `cluster.batch_on_loss: shrink`, else the replicas
/// left take the lost one's microbatches (the default, `keep`).
void lose_a_replica(const std::string& local_update, int replicas, bool survivors_agree = false, bool shrink = false) {
  auto dir = fs::temp_directory_path() / ("troupe_lu_kill_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  constexpr int steps = 3000;
  // Replicas of a 2-stage pipeline, one replica per node process (the loader runs with replica 0).
  std::ofstream{dir / "graph.yaml"} << "model: {layers: 2, d_model: 32, heads: 2, context: 16, vocab: 256}\n"
                                    << "data: {corpus: kjv, batch: 2, seed: 7}\n"
                                    << "train: {steps: " << steps << ", lr: 3.0e-3, warmup: 2, eval_batches: 2}\n"
                                    << "pipeline: {stages: 2, microbatches: 2, schedule: 1f1b}\n"
                                    << "data_parallel: {replicas: " << replicas << "}\n"
                                    << "local_update: " << local_update << "\n"
                                    << "cluster: {launcher: local, nodes: " << replicas
                                    << (shrink ? ", batch_on_loss: shrink}\n" : "}\n")
                                    << "checkpoint: {dir: ck, every: " << steps << "}\n";
  troupe_process launch{dir, {"launch", (dir / "graph.yaml").string(), "--no-trace"}};
  auto coordinator = launch.wait_for(R"(coordinator on (127\.0\.0\.1:\d+))");
  launch.wait_for(R"(step\s+\d+/3000)"); // training is under way, exchanges between the nodes included
  std::this_thread::sleep_for(300ms);
  auto [code, took, err] = kill_node(launch, coordinator, 1);
  if (code == -1) { // still training after 10 s (a loaded machine): it goes on, as it should
    code = launch.wait(120s);
    err = slurp(launch.err);
  }
  auto out = slurp(launch.out);
  INFO(out, err);
  MESSAGE(local_update, ": exit code ", code, " (", took, " s after the kill at least)");
  CHECK(code == 0);
  CHECK(err.find("lost node 1") != std::string::npos);
  CHECK(err.find("replica 1 leaves the run (r1s0, r1s1, r1s0_sync, r1s1_sync)") != std::string::npos);
  CHECK(err.find("goes on with replica") != std::string::npos);
  // It says what the global batch does: batch 2 x 2 microbatches per replica.
  if (shrink)
    CHECK(err.find(fmt::format("each step's batch shrinking from {} to {} sequences", 4 * replicas,
                               4 * (replicas - 1))) != std::string::npos);
  else
    CHECK(err.find(fmt::format("which take{} its microbatches: each step keeps its batch of {} sequences",
                               replicas == 2 ? "s" : "", 4 * replicas)) != std::string::npos);
  CHECK(out.find(fmt::format("{} steps in", steps)) != std::string::npos); // every step, by the replicas left
  // What the loader read: every step's sequences when kept, but the lost
  // replica's share of the step it was lost in (at most its 4, dealt before
  // the loss reached the loader); far fewer when the batch shrank.
  const long all = static_cast<long>(steps) * 4 * replicas,
             read = loader_position(dir / "ck" / fmt::format("step-{:06}", steps));
  MESSAGE("the loader read ", read, " sequences of ", all);
  if (shrink)
    CHECK(read < all - 4 * 100); // the kill fell at least 100 steps before the end
  else
    CHECK((read <= all && read >= all - 4));
  std::this_thread::sleep_for(200ms);
  CHECK(processes_with("--coordinator " + coordinator).empty());
  if (survivors_agree) { // step 3000 ends an outer step
    auto last = dir / "ck" / fmt::format("step-{:06}", steps);
    int compared = 0;
    for (const auto* part : {"s0", "s1", "s0_sync", "s1_sync"})
      for (int r = 2; r < replicas; ++r)
        compared +=
          same_tensors(last / fmt::format("r0{}.safetensors", part), last / fmt::format("r{}{}.safetensors", r, part),
                       [](const std::string& name) { // each replica's own: AdamW's, SparseLoCo's feedback
                         return name.starts_with("optimizer.") || name == "sync.error";
                       });
    MESSAGE(compared, " tensors of the survivors' checkpoints compared, bit for bit");
    CHECK(compared > 8); // each stage's parameters, global and outer momentum
  }
  fs::remove_all(dir);
}

} // namespace

TEST_CASE("a DiLoCo run that loses a replica's node finishes with the others, exit 0, naming it; its batch shrinks") {
  lose_a_replica("{algorithm: diloco, sync_every: 4}", 2, false, true);
}

TEST_CASE("a NoLoCo run that loses a replica's node finishes with the others, exit 0, naming it") {
  lose_a_replica("{algorithm: noloco, sync_every: 4, group: 2, route: chain}", 2);
}

TEST_CASE("a DiLoCo run of 3 replicas that loses one re-forms its exchange among the two left") {
  lose_a_replica("{algorithm: diloco, sync_every: 4, quantize: int8}", 3, true);
}

TEST_CASE("a SparseLoCo run of 3 replicas that loses one goes on, the two left agreeing bit for bit") {
  lose_a_replica("{algorithm: sparseloco, sync_every: 4}", 3, true);
}
