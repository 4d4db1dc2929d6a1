// Ctrl-C and SIGTERM during `troupe run` and `troupe launch`: every actor and
// node stops, traces are written, the last checkpoint is named and resumable.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/integration/troupe_process.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace troupe::testing;

namespace {

/// A fresh folder with a small 4-stage graph that would train for hours,
/// checkpointing every 10 steps.
fs::path make_graph(const std::string& name, const std::string& extra = "") {
  return small_pipeline_graph("intr_" + name, 10000000, "checkpoint: {dir: ckpt, every: 10}\n" + extra);
}

/// The trace at `path` parses and holds spans.
void check_trace(const fs::path& path) {
  CAPTURE(path);
  REQUIRE(fs::exists(path));
  auto t = nlohmann::json::parse(slurp(path));
  CHECK(t.at("traceEvents").size() > 10);
}

} // namespace

TEST_CASE("Ctrl-C stops troupe run cleanly: exit 130, the trace written, the last checkpoint named and resumable") {
  auto dir = make_graph("run");
  troupe_process run{dir, {"run", (dir / "graph.yaml").string(), "--trace", (dir / "trace.json").string()}};
  run.wait_for(R"(checkpoint step 20 ->)");
  REQUIRE(::kill(run.pid, SIGINT) == 0);
  CHECK(run.wait(30s) == 130);
  auto err = slurp(run.err);
  CHECK(err.find("interrupted by SIGINT before the run finished") != std::string::npos);
  CHECK(err.find("is intact (--resume " + (dir / "ckpt").string() + ")") != std::string::npos);
  check_trace(dir / "trace.json");
  // The checkpoint it names continues the run.
  std::smatch m;
  REQUIRE(std::regex_search(err, m, std::regex{R"(step-(\d+), is intact)"}));
  auto last = std::stol(m[1].str());
  CHECK(last >= 20);
  troupe_process resumed{dir,
                         {"run", (dir / "graph.yaml").string(), "--resume", (dir / "ckpt").string(), "--steps",
                          std::to_string(last + 5), "--no-trace"}};
  CHECK(resumed.wait(60s) == 0);
  CHECK(slurp(resumed.out).find("resuming from " + (dir / "ckpt" / m[0].str().substr(0, 11)).string()) !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("SIGTERM stops troupe run the same way, with exit code 143") {
  auto dir = make_graph("term");
  troupe_process run{dir, {"run", (dir / "graph.yaml").string(), "--no-trace"}};
  run.wait_for(R"(checkpoint step 10 ->)");
  REQUIRE(::kill(run.pid, SIGTERM) == 0);
  CHECK(run.wait(30s) == 143);
  CHECK(slurp(run.err).find("interrupted by SIGTERM") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("Ctrl-C to a launch's whole process group stops every node cleanly and leaves each node's trace") {
  auto dir = make_graph("launch", "cluster: {launcher: local, nodes: 2}\n");
  auto trace = dir / "trace.json";
  // A terminal sends Ctrl-C to the foreground job's group: the coordinator and its nodes alike.
  troupe_process launch{dir, {"launch", (dir / "graph.yaml").string(), "--trace", trace.string()}, true};
  auto coordinator = launch.wait_for(R"(coordinator on (\S+),)");
  launch.wait_for(R"(checkpoint step 20 ->)");
  REQUIRE(::kill(-launch.pid, SIGINT) == 0);
  CHECK(launch.wait(30s) == 130);
  auto err = slurp(launch.err);
  CHECK(err.find("troupe launch: interrupted by SIGINT before the run finished") != std::string::npos);
  CHECK(err.find("lost node") == std::string::npos); // the nodes stopped because they were told to
  CHECK(err.find("is intact (--resume " + (dir / "ckpt").string() + ")") != std::string::npos);
  check_trace(dir / "trace.node0.json");
  check_trace(dir / "trace.node1.json");
  CHECK(processes_with("--coordinator " + coordinator).empty());
  fs::remove_all(dir);
}
