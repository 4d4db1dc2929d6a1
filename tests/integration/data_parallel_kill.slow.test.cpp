// A launched DDP run survives the loss of a replica's node (#26): the replicas
// left finish the step it was lost in, take its microbatches from the next
// one on, and hold the same parameters and optimizer state bit for bit at the
// end; the loss ends within 2% of the same run without the kill. With
// `cluster.restart` the node is started again and its replica rejoins from a
// live replica's state (no checkpoint read), and all three agree. With
// `cluster.elastic: false` the launch ends instead, within 5 seconds with exit
// 1, naming the lost node and the actors it ran (its stages and their peers).
// ZeRO-1/2 the same, its optimizer shards mirroring each other's slices.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>
#include <thread>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/same_tensors.hpp"

#include "tests/integration/troupe_process.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace troupe::testing;

TEST_CASE("killing the node of a DDP replica ends a launch that is not elastic within 5 seconds with exit 1") {
  auto dir = fs::temp_directory_path() / ("troupe_ddp_kill_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Two replicas of a 2-stage pipeline, one replica per node process.
  std::ofstream{dir / "graph.yaml"} << "model: {layers: 4, d_model: 32, heads: 2, context: 16, vocab: 256}\n"
                                    << "data: {corpus: kjv, batch: 4, seed: 7}\n"
                                    << "train: {steps: 100000, lr: 3.0e-3, warmup: 2, eval_batches: 2}\n"
                                    << "pipeline: {stages: 2, microbatches: 4, schedule: 1f1b}\n"
                                    << "data_parallel: {replicas: 2, bucket: 64KB}\n"
                                    << "cluster: {launcher: local, nodes: 2, elastic: false}\n";
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

namespace {

constexpr int steps = 3000;

/// How the replicas train: the defaults (1F1B, f32 buckets, synchronous clipping, plain DDP), or others.
struct ddp_setup {
  std::string schedule = "schedule: 1f1b", wire = "f32", clip = "sync";
  int layers = 2;
  int zero = 0;        ///< ZeRO-1/2: optimizer shards that mirror each other's slices instead of all-reduce peers
  std::string route{}; ///< `data_parallel.route` (least_loaded: the later stage chosen on the way)
  int restarts = 1;    ///< with restart: `cluster.restart` (more than one: each node stays down a second)
};

/// `restart`: `cluster.restart: 1`, so the lost node is started again and its replica rejoins.
void write_ddp_graph(const fs::path& dir, bool restart, const ddp_setup& how) {
  // Three replicas of a 2-stage pipeline, one per node process (the loader runs with replica 0).
  std::ofstream{dir / "graph.yaml"} << "model: {layers: " << how.layers
                                    << ", d_model: 32, heads: 2, context: 16, vocab: 256}\n"
                                    << "data: {corpus: kjv, batch: 2, seed: 7}\n"
                                    << "train: {steps: " << steps
                                    << ", lr: 1.0e-3, warmup: 2, eval_every: 250, eval_batches: 64, clip: " << how.clip
                                    << "}\n"
                                    << "pipeline: {stages: 2, microbatches: 2, " << how.schedule << "}\n"
                                    << "data_parallel: {replicas: 3, bucket: 16KB, wire: " << how.wire
                                    << (how.zero > 0 ? ", zero: " + std::to_string(how.zero) : std::string{})
                                    << (how.route.empty() ? std::string{} : ", route: " + how.route) << "}\n"
                                    << "cluster: {launcher: local, nodes: 3"
                                    << (!restart ? std::string{"}\n"}
                                        : how.restarts == 1
                                          ? std::string{", restart: 1}\n"}
                                          : fmt::format(", restart: {}, restart_delay: 1}}\n", how.restarts))
                                    << "checkpoint: {dir: ck, every: " << steps
                                    << "}\n"
                                    // A slow stage the others route around: microbatches cross replicas all along.
                                    << (how.route == "least_loaded" ? "actors:\n  - {name: r0s1, slowdown: 3}\n" : "");
}

/// The loss of base/clean, the same run without a failure.
double clean_loss_of(const fs::path& base) {
  troupe_process clean{base / "clean", {"launch", (base / "clean" / "graph.yaml").string(), "--no-trace"}};
  REQUIRE(clean.wait(300s) == 0);
  return last_val_loss(slurp(clean.out));
}

/// Waits until `launch` trains, with the bucket exchanges between the nodes,
/// and a little more (some steps in, buckets likely in flight); its coordinator's address.
std::string under_way(troupe_process& launch) {
  auto coordinator = launch.wait_for(R"(coordinator on (127\.0\.0\.1:\d+))");
  launch.wait_for(R"(step\s+\d+/3000)");
  std::this_thread::sleep_for(300ms);
  return coordinator;
}

/// Kills node 1 (replica 1) mid-run: the run must end with exit 0, having read
/// every step's sequences but the lost replica's share of the step it was lost
/// in, with every replica still in (the two left; all three when it rejoined)
/// holding the same parameters and AdamW state bit for bit, and a loss within
/// 2% of the same run without the kill.
void lose_ddp_replica(bool rejoin, const ddp_setup& how = {}) {
  auto base = fs::temp_directory_path() / ("troupe_ddp_elastic_" + std::to_string(::getpid()));
  fs::remove_all(base);
  for (const auto* d : {"lost", "clean"}) {
    fs::create_directories(base / d);
    write_ddp_graph(base / d, rejoin, how);
  }
  auto clean_loss = clean_loss_of(base);
  auto dir = base / "lost";
  troupe_process launch{dir, {"launch", (dir / "graph.yaml").string(), "--no-trace"}};
  auto coordinator = under_way(launch);
  auto pids = processes_with("--coordinator " + coordinator + " --node 1");
  REQUIRE(pids.size() == 1);
  ::kill(pids[0], SIGKILL);
  int at = -1;
  if (rejoin)
    at = std::stoi(launch.wait_for(R"(replica 1 rejoins at step (\d+))", 120s));
  int code = launch.wait(300s);
  auto out = slurp(launch.out), err = slurp(launch.err);
  INFO(out, err);
  CHECK(code == 0);
  CHECK(err.find("lost node 1") != std::string::npos);
  const char* helper = how.zero > 0 ? "os" : "ar";
  auto mechanism = how.zero > 0 ? fmt::format("ZeRO-{}", how.zero) : std::string{"DDP"};
  CHECK(err.find(fmt::format("replica 1 leaves the run (r1s0, r1s1, r1s0_{0}, r1s1_{0}); {1} training goes on with "
                             "replicas 0, 2, which take its microbatches: each step keeps its batch of 12 sequences",
                             helper, mechanism)) != std::string::npos);
  if (rejoin) {
    CHECK(err.find("starting node 1 again (restart 1 of 1)") != std::string::npos);
    CHECK(err.find(fmt::format("replica 1 rejoins at step {} with replica 0's parameters{} (no checkpoint read); it "
                               "takes its own microbatches of each step's 12 sequences back",
                               at,
                               how.zero > 0 ? " and its optimizer shards' slices from the replicas that mirror them"
                                            : ", optimizer state")) != std::string::npos);
    CHECK(at > 1);
    CHECK(at < steps);
    CHECK(out.find("[node 1] r1s1: busy") != std::string::npos); // the node started again trained to the end
  }
  CHECK(out.find(fmt::format("{} steps in", steps)) != std::string::npos);
  if (how.route == "least_loaded") { // every survivor's stage says what the loss cost it
    std::regex left{R"((r[02]s[01]): replica 1 left in step \d+: (\d+) microbatch)"};
    int stages = 0, backed = 0;
    for (auto it = std::sregex_iterator(out.begin(), out.end(), left); it != std::sregex_iterator(); ++it)
      ++stages, backed += std::stoi((*it)[2].str());
    MESSAGE(backed, " microbatches backed out with zero gradients over the survivors' ", stages, " stages");
    CHECK(stages == 4);
    if (rejoin) { // and each takes the joiner's stages back at the loader's step
      std::regex back{fmt::format(R"((r[02]s[01]): replica 1 rejoins at step {}: its stages are routed to again)", at)};
      CHECK(std::distance(std::sregex_iterator(out.begin(), out.end(), back), std::sregex_iterator()) == 4);
    }
  }
  // Every step's sequences but the lost replica's share of the step it was lost in.
  auto last = dir / "ck" / fmt::format("step-{:06}", steps);
  const long all = static_cast<long>(steps) * 12, read = loader_position(last);
  MESSAGE("the loader read ", read, " sequences of ", all);
  CHECK((read <= all && read >= all - 4));
  // DDP agrees every step: parameters, AdamW's moments and step counts, all of it. Under ZeRO the stages
  // hold the parameters (the same bits everywhere), the shards each a different slice of the moments,
  // and any two holders of one slice agree on its update (a shard that gets two copies that differ
  // stops the run, actors/optimizer_shard_direct.cpp).
  int compared = 0;
  for (const auto* part : {"s0", "s1"})
    for (int r : rejoin ? std::vector<int>{1, 2} : std::vector<int>{2})
      compared +=
        same_tensors(last / fmt::format("r0{}.safetensors", part), last / fmt::format("r{}{}.safetensors", r, part),
                     [](const std::string&) { return false; });
  MESSAGE(compared, " tensors of the replicas' last checkpoints compared, bit for bit");
  // DDP: 87 a replica, each parameter with its two AdamW moments, the step counts; ZeRO: the 29 parameters.
  const int each = how.zero > 0 ? 29 : 80;
  CHECK(compared >= (rejoin ? 2 * each : each));
  auto lost_loss = last_val_loss(out);
  MESSAGE("loss ", lost_loss, " against ", clean_loss, " without the kill",
          rejoin ? fmt::format("; rejoined at step {}", at) : std::string{});
  CHECK(std::abs(lost_loss - clean_loss) <= 0.02 * clean_loss);
  std::this_thread::sleep_for(200ms);
  CHECK(processes_with("--coordinator " + coordinator).empty());
  fs::remove_all(base);
}

} // namespace

TEST_CASE("a DDP launch that loses a replica's node goes on with the two left, which agree bit for bit") {
  lose_ddp_replica(false);
}

TEST_CASE("with cluster.restart the lost DDP replica comes back with a live replica's state, and all three agree") {
  lose_ddp_replica(true);
}

TEST_CASE("the same with interleaved chunks, bf16 buckets and post-validated clipping: all three agree") {
  lose_ddp_replica(true, {"schedule: interleaved_1f1b, virtual: 2", "bf16", "post_validate", 4});
}

// Routed around stragglers (least_loaded): a stage of replica 0 or 2 may have
// sent the lost replica's second stage a microbatch, or taken one from its
// first. The stages stop routing to it, count what it sent as all it will, and
// back each microbatch it held out with a zero gradient, so the step completes
// on the replicas left (stage_engine::on_replica_lost). With cluster.restart
// the node comes back: every survivor's stage routes to the joiner's stages
// again from the loader's step, counts their reports and grants them credits
// (stage_engine::on_rejoin).
TEST_CASE("a least_loaded launch that loses a replica's node goes on with the two left, which agree bit for bit") {
  lose_ddp_replica(false, {.route = "least_loaded"});
}

TEST_CASE("with cluster.restart the lost least_loaded replica is routed to again from its step, and all three agree") {
  lose_ddp_replica(true, {.route = "least_loaded"});
}

// Two replicas lost 100 ms apart (nodes 1 and 2), the second started again once
// the first is back: replica 1 rejoins while replica 2 is still out, which the
// launch tells its new stages before they start (they route around it and wait
// for none of its reports), and they take it back with the others when it
// rejoins in turn.
TEST_CASE("least_loaded: two replicas lost one after the other both rejoin, and all three agree") {
  auto base = fs::temp_directory_path() / ("troupe_ll_twice_" + std::to_string(::getpid()));
  fs::remove_all(base);
  for (const auto* d : {"lost", "clean"}) {
    fs::create_directories(base / d);
    write_ddp_graph(base / d, true, {.route = "least_loaded", .restarts = 2});
  }
  auto clean_loss = clean_loss_of(base);
  auto dir = base / "lost";
  troupe_process launch{dir, {"launch", (dir / "graph.yaml").string(), "--no-trace"}};
  auto coordinator = under_way(launch);
  for (int node : {1, 2}) {
    auto pids = processes_with(fmt::format("--coordinator {} --node {}", coordinator, node));
    REQUIRE(pids.size() == 1);
    ::kill(pids[0], SIGKILL);
    std::this_thread::sleep_for(100ms);
  }
  int first = std::stoi(launch.wait_for(R"(replica 1 rejoins at step (\d+))", 120s));
  int second = std::stoi(launch.wait_for(R"(replica 2 rejoins at step (\d+))", 120s));
  int code = launch.wait(300s);
  auto out = slurp(launch.out), err = slurp(launch.err);
  INFO(out, err);
  CHECK(code == 0);
  CHECK(err.find("node 2 is started again once node 1 is back") != std::string::npos);
  CHECK(first < second);
  // Replica 2's rejoin reaches every stage in the run then, replica 1's new ones included.
  std::regex back{fmt::format(R"((r[01]s[01]): replica 2 rejoins at step {}: its stages are routed to again)", second)};
  CHECK(std::distance(std::sregex_iterator(out.begin(), out.end(), back), std::sregex_iterator()) == 4);
  CHECK(out.find(fmt::format("{} steps in", steps)) != std::string::npos);
  auto last = dir / "ck" / fmt::format("step-{:06}", steps);
  int compared = 0;
  for (const auto* part : {"s0", "s1"})
    for (int r : {1, 2})
      compared +=
        same_tensors(last / fmt::format("r0{}.safetensors", part), last / fmt::format("r{}{}.safetensors", r, part),
                     [](const std::string&) { return false; });
  MESSAGE(compared, " tensors of the three replicas' last checkpoints compared, bit for bit");
  CHECK(compared >= 160);
  auto loss = last_val_loss(out);
  MESSAGE("loss ", loss, " against ", clean_loss, " without the kills; rejoined at steps ", first, " and ", second);
  CHECK(std::abs(loss - clean_loss) <= 0.02 * clean_loss);
  std::this_thread::sleep_for(200ms);
  CHECK(processes_with("--coordinator " + coordinator).empty());
  fs::remove_all(base);
}

// ZeRO-2 under the same routes: the survivors' shards sum what the backed-out
// microbatches left, and the joiner's slices come from their other holders.
TEST_CASE("with cluster.restart a lost least_loaded ZeRO-2 replica leaves and rejoins, and all three agree") {
  lose_ddp_replica(true, {.zero = 2, .route = "least_loaded"});
}

// ZeRO (#26 "ZeRO shards are re-sharded across the members present"): the
// lost replica's slice of the optimizer state is still held by the replica
// that mirrors it, so the two left cover all three slices and go on; with
// cluster.restart the node comes back and takes its two slices' state from
// their other holders, in memory.
TEST_CASE("a ZeRO-1 launch that loses a replica's node goes on with the two left, which agree bit for bit") {
  lose_ddp_replica(false, {.zero = 1});
}

TEST_CASE("with cluster.restart the lost ZeRO-2 replica comes back with its slices' optimizer state from the "
          "replicas that mirror them, and all three agree") {
  lose_ddp_replica(true, {.zero = 2});
}

// A joiner's slices come from their other holders (replica 1 holds slices 1
// and 2, whose other holders are replicas 0 and 2). When one of them is lost
// before it sends the state, that slice's moments are gone: a survivor's shard,
// which counts the joiner away until its step, stops the run at once, naming
// the slice, and nobody waits for the state. r2s0 sleeps 10 s at the start of
// step 2, so replica 2's shards are still at step 1 when replica 1 is back and
// placed at a later step: the state cannot have gone yet.
TEST_CASE(
  "a ZeRO joiner whose slice's other holder is lost before it sends the state stops the run, naming the slice") {
  auto dir = fs::temp_directory_path() / ("troupe_zero_holder_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_ddp_graph(dir, true, {.zero = 2});
  std::ofstream{dir / "graph.yaml", std::ios::app} << "actors:\n  - {name: r2s0, stall: {step: 2, for: 10s}}\n";
  troupe_process launch{dir, {"launch", (dir / "graph.yaml").string(), "--no-trace"}};
  auto coordinator = launch.wait_for(R"(coordinator on (127\.0\.0\.1:\d+))");
  auto kill_node = [&](int node) {
    auto pids = processes_with(fmt::format("--coordinator {} --node {}", coordinator, node));
    REQUIRE(pids.size() == 1);
    ::kill(pids[0], SIGKILL);
  };
  launch.wait_for(R"(step\s+1/3000)"); // step 2 has begun: r2s0 sleeps
  kill_node(1);
  launch.wait_for(R"(replica 1 rejoins at step (\d+))", 60s);
  auto killed = std::chrono::steady_clock::now();
  kill_node(2);
  int code = launch.wait(60s);
  auto out = slurp(launch.out), err = slurp(launch.err);
  INFO(out, err);
  CHECK(code == 1);
  CHECK(err.find("slice 2 of 3 of the optimizer state is lost: replicas 2 and 1, which held it, are both gone; the "
                 "run stops") != std::string::npos);
  auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  MESSAGE("the launch ended ", took, " s after the second kill");
  CHECK(took < 5.0); // well within the stall: it did not wait for the state
  std::this_thread::sleep_for(200ms);
  CHECK(processes_with("--coordinator " + coordinator).empty());
  fs::remove_all(dir);
}

TEST_CASE("a ZeRO launch that loses both holders of a slice stops, naming the slice and the replicas that held it") {
  auto dir = fs::temp_directory_path() / ("troupe_zero_both_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_ddp_graph(dir, false, {.zero = 1});
  troupe_process launch{dir, {"launch", (dir / "graph.yaml").string(), "--no-trace"}};
  auto coordinator = launch.wait_for(R"(coordinator on (127\.0\.0\.1:\d+))");
  launch.wait_for(R"(step\s+\d+/3000)");
  std::this_thread::sleep_for(300ms);
  // Slice 2 of 3 is held by replicas 2 and 1: both nodes go.
  for (int node : {1, 2}) {
    auto pids = processes_with("--coordinator " + coordinator + " --node " + std::to_string(node));
    REQUIRE(pids.size() == 1);
    ::kill(pids[0], SIGKILL);
  }
  int code = launch.wait(60s);
  auto err = slurp(launch.err);
  INFO(err);
  CHECK(code == 1);
  // The launch foresees it at the second loss ("; slice"), rather than saying training goes on
  // and leaving it to the shards (": slice").
  CHECK(err.find("; slice 2 of 3 of the optimizer state is lost") != std::string::npos);
  CHECK(err.find("slice 2 of 3 of the optimizer state is lost: replicas 2 and 1, which held it, are both gone") !=
        std::string::npos);
  std::this_thread::sleep_for(200ms);
  CHECK(processes_with("--coordinator " + coordinator).empty());
  fs::remove_all(dir);
}
