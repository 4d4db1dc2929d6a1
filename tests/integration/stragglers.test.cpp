// Stragglers and hangs are visible (#26 item 4): a stage made 3x slower and a
// stage stuck once, told apart in `--summary-json`; and a stage stuck past
// trace.hang_after, named by the hang detector with its action while the run goes on.
#include <algorithm>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/integration/troupe_process.hpp"

using namespace troupe::testing;

TEST_CASE("a 3x slower stage is the chronic straggler ranked first; a stage stuck in one step is a one-off") {
  // Two replicas of a 4-stage pipeline, 30 steps: r1s2 computes 3x as long in
  // every action (slowdown); r1s1 sleeps 0.4 s in the first action of step 10.
  // Both in replica 1: the emulated slowdown sleeps, so replica 0's stages get
  // more of a busy machine's cores and run each action slower than replica 1's
  // (up to 1.5x at a load of 10 on 2 cores): a stage of replica 0 compared with
  // its replica-1 peer would look slow for that alone.
  auto dir = small_pipeline_graph("stragglers", 30,
                                  "data_parallel: {replicas: 2}\n"
                                  "actors:\n"
                                  "  - {name: r1s2, slowdown: 3}\n"
                                  "  - {name: r1s1, stall: {step: 10, for: 0.4s}}\n");
  auto summary = dir / "summary.json";
  // A bigger batch than the helper's: actions of several ms, so a busy machine's
  // scheduling noise stays small beside them.
  REQUIRE(run_to_end(dir, {"run", (dir / "graph.yaml").string(), "--set", "data.batch=16", "--set", "model.d_model=64",
                           "--no-trace", "--summary-json", summary.string()}) == 0);
  auto j = nlohmann::json::parse(slurp(summary)).at("stragglers");
  CAPTURE(j.dump(1));
  REQUIRE(j.at("top").size() == 5); // the default top 5 of the 8 stages
  CHECK(j["top"][0] == "r1s2");
  const auto& slow = j["actors"]["r1s2"];
  CHECK(slow["chronic"] == true);
  CHECK(slow["steps"] == 30);
  CHECK(slow["ewma"].get<double>() > 2.0);
  CHECK(slow["median_ms"].get<double>() > 2.0 * j["actors"]["r0s2"]["median_ms"].get<double>());
  const auto& stuck = j["actors"]["r1s1"];
  CHECK(stuck["chronic"] == false);
  CHECK(stuck["max_ms"].get<double>() >= 400.0); // the stall is in its step time
  // One step held the 0.4 s: its others are far shorter (about 20 ms here, 195 ms under TSan).
  CHECK(stuck["median_ms"].get<double>() < stuck["max_ms"].get<double>() / 2);
  auto stalls = stuck["stalls"].get<std::vector<int>>();
  CHECK(std::find(stalls.begin(), stalls.end(), 9) != stalls.end()); // 0-based: step 10
  for (const auto* healthy : {"r1s0", "r1s3"})
    CHECK(j["actors"][healthy]["chronic"] == false);
  fs::remove_all(dir);
}

namespace {

/// Runs the graph in `dir` with `stuck` stalled past trace.hang_after (1 s):
/// it must be named once, while the run still goes, as `(TYPE, node 0) has been
/// in one handler for …, longer than trace.hang_after (1 s): DOING`, and the run
/// must finish; `waiting`, which only waits on it, is never named.
void check_named_hang(const fs::path& dir, const std::string& stuck, const std::string& type, const std::string& doing,
                      const std::string& waiting) {
  troupe_process run{dir, {"run", (dir / "graph.yaml").string(), "--no-trace"}};
  auto line = run.wait_for("(hang: actor '" + stuck + "'.*)", 60s);
  int status = 0;
  CHECK(::waitpid(run.pid, &status, WNOHANG) == 0); // named while it was still stuck: the run is going
  CHECK(line.find("(" + type + ", node 0) has been in one handler for") != std::string::npos);
  CHECK(line.find("longer than trace.hang_after (1 s): " + doing) != std::string::npos);
  CHECK(run.wait(60s) == 0);
  auto err = slurp(run.err);
  CHECK(err.find("hang: actor '" + stuck + "'") == err.rfind("hang: actor '" + stuck + "'")); // once per handler
  CHECK(err.find("hang: actor '" + waiting + "'") == std::string::npos); // it only waits: no handler runs
  fs::remove_all(dir);
}

} // namespace

TEST_CASE("a stage stuck past trace.hang_after is named with what it was doing while the run goes on") {
  check_named_hang(small_pipeline_graph("hang", 6,
                                        "trace: {hang_after: 1s}\n"
                                        "actors:\n"
                                        "  - {name: s2, stall: {step: 3, for: 4s}}\n"),
                   "s2", "pipeline_stage", "forward of microbatch 0, step 3, chunk 0", "s1");
}

// Every actor type's handlers are watched, not only the stages': a DiLoCo sync
// actor stuck in one exchange (an emulated stall) is named with its node and
// the message it was handling, once, while the run goes on and then finishes;
// its peer only waits for its part.
TEST_CASE("a sync actor stuck past trace.hang_after is named with the message it was handling") {
  check_named_hang(small_pipeline_graph("hang_sync", 8,
                                        "data_parallel: {replicas: 2}\n"
                                        "local_update: {algorithm: diloco, sync_every: 4}\n"
                                        "trace: {hang_after: 1s}\n"
                                        "actors:\n"
                                        "  - {name: r0s1_sync, stall: {step: 4, for: 4s}}\n"),
                   "r0s1_sync", "outer_sync", "handling a stage values message", "r1s1_sync");
}
