// Multi-process runs on loopback, through the real `troupe launch` and real
// node processes: same losses as one process, a killed node, hostile input.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "runtime/actor/errors.hpp"
#include "runtime/transport/transport.hpp"
#include "tests/integration/troupe_process.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace troupe::testing;

namespace {

/// A fresh folder with a small 4-stage pipeline graph in it.
fs::path make_graph(const std::string& name, int steps, const std::string& cluster) {
  return small_pipeline_graph("mp_" + name, steps, cluster);
}

} // namespace

TEST_CASE("a pipeline split across 2 and 4 processes gives the one-process loss curve") {
  auto dir = make_graph("same", 8, "");
  REQUIRE(sh(troupe_exe() + " run " + (dir / "graph.yaml").string() + " --no-trace --summary-json " +
             (dir / "one.json").string() + " > /dev/null") == 0);
  auto reference = summary_losses(dir / "one.json");
  REQUIRE(reference.size() == 8);
  for (int nodes : {2, 4}) {
    CAPTURE(nodes);
    auto summary = dir / ("nodes" + std::to_string(nodes) + ".json");
    REQUIRE(sh(troupe_exe() + " launch " + (dir / "graph.yaml").string() +
               " --set cluster.nodes=" + std::to_string(nodes) + " --summary-json " + summary.string() + " --trace " +
               (dir / "trace.json").string() + " > " + (dir / "launch.txt").string() + " 2>&1") == 0);
    for (int i = 0; i < nodes; ++i) { // each node's own trace, valid JSON with its spans
      auto t = nlohmann::json::parse(slurp(dir / ("trace.node" + std::to_string(i) + ".json")));
      CHECK(t.at("traceEvents").size() > 10);
    }
    auto got = summary_losses(summary);
    REQUIRE(got.size() == reference.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      CHECK(got[i] == doctest::Approx(reference[i]).epsilon(1e-5));
  }
  fs::remove_all(dir);
}

TEST_CASE("routes that skip and reorder stages train the same in one process and across 2 processes") {
  // Microbatch k takes path k mod 2, 3 per step: s1 and s2 see 2, 1, 2, ... microbatches
  // in turn (and s2 runs before s1 on the first path); channels for the paths come from the shorthand.
  auto dir = small_pipeline_graph("mp_paths", 8, "");
  {
    std::ofstream g{dir / "graph.yaml", std::ios::app};
    g << "pipeline: {stages: 4, microbatches: 3, schedule: 1f1b, routing: {policy: paths, paths: [[s0, s2, s1, s3], "
         "[s0, s3]]}}\n";
  }
  auto text = slurp(dir / "graph.yaml"); // the helper's own pipeline line goes: the last one is ours
  auto first = text.find("pipeline:");
  text.erase(first, text.find('\n', first) - first + 1);
  std::ofstream{dir / "graph.yaml"} << text;
  REQUIRE(sh(troupe_exe() + " run " + (dir / "graph.yaml").string() + " --no-trace --summary-json " +
             (dir / "one.json").string() + " > " + (dir / "run.txt").string() + " 2>&1") == 0);
  auto one = summary_losses(dir / "one.json");
  REQUIRE(one.size() == 8);
  CHECK(one.back() < one.front() - 0.3); // it learns
  REQUIRE(sh(troupe_exe() + " launch " + (dir / "graph.yaml").string() + " --set cluster.nodes=2 --no-trace " +
             "--summary-json " + (dir / "two.json").string() + " > " + (dir / "launch.txt").string() + " 2>&1") == 0);
  auto two = summary_losses(dir / "two.json");
  REQUIRE(two.size() == one.size());
  for (std::size_t i = 0; i < one.size(); ++i)
    CHECK(two[i] == doctest::Approx(one[i]).epsilon(1e-5));
  fs::remove_all(dir);
}

TEST_CASE("a launched run writes checkpoints that a launched or one-process resume continues exactly") {
  auto dir =
    make_graph("resume", 12, "cluster: {launcher: local, nodes: 2}\ncheckpoint: {dir: ckpt, every: 4, keep: 3}\n");
  auto graph = (dir / "graph.yaml").string();
  REQUIRE(sh(troupe_exe() + " launch " + graph + " --summary-json " + (dir / "full.json").string() + " > " +
             (dir / "full.txt").string() + " 2>&1") == 0);
  auto full = summary_losses(dir / "full.json");
  REQUIRE(full.size() == 12);
  CHECK(slurp(dir / "full.txt").find("checkpoint step 8 -> ") != std::string::npos);
  REQUIRE(fs::exists(dir / "ckpt" / "step-000004" / "checkpoint.json"));
  REQUIRE(sh(troupe_exe() + " launch " + graph + " --resume " + (dir / "ckpt" / "step-000004").string() +
             " --summary-json " + (dir / "resumed.json").string() + " > /dev/null 2>&1") == 0);
  auto resumed = summary_losses(dir / "resumed.json");
  REQUIRE(resumed.size() == 8);
  for (std::size_t i = 0; i < resumed.size(); ++i)
    CHECK(resumed[i] == full[i + 4]);
  // The same checkpoint, read by one process.
  REQUIRE(sh(troupe_exe() + " run " + graph + " --no-trace --resume " + (dir / "ckpt" / "step-000008").string() +
             " --summary-json " + (dir / "one.json").string() + " > /dev/null 2>&1") == 0);
  auto one = summary_losses(dir / "one.json");
  REQUIRE(one.size() == 4);
  for (std::size_t i = 0; i < one.size(); ++i)
    CHECK(one[i] == full[i + 8]);
  fs::remove_all(dir);
}

TEST_CASE("killing a node's process stops the launch within 5 seconds, naming the node, with no process left") {
  auto dir = make_graph("kill", 100000, "cluster: {launcher: local, nodes: 2}\n");
  troupe_process launch{dir, {"launch", (dir / "graph.yaml").string()}};
  auto coordinator = launch.wait_for(R"(coordinator on (127\.0\.0\.1:\d+))");
  launch.wait_for(R"(step\s+\d+/100000)"); // training is under way
  auto [code, took, err] = kill_node(launch, coordinator, 1);
  MESSAGE("the launch ended " << took << " s after the kill with exit code " << code);
  CHECK(code == 1);
  CHECK(took < 5.0);
  CHECK(err.find("lost node 1") != std::string::npos);
  CHECK(err.find("s2, s3") != std::string::npos);
  std::this_thread::sleep_for(200ms);
  CHECK(processes_with("--coordinator " + coordinator).empty());
  fs::remove_all(dir);
}

TEST_CASE("a node that stops answering is declared lost within 5 seconds and the launch still ends cleanly") {
  auto dir = make_graph("hang", 100000, "cluster: {launcher: local, nodes: 2}\n");
  troupe_process launch{dir, {"launch", (dir / "graph.yaml").string()}};
  auto coordinator = launch.wait_for(R"(coordinator on (127\.0\.0\.1:\d+))");
  launch.wait_for(R"(step\s+\d+/100000)");
  auto node1 = processes_with("--coordinator " + coordinator + " --node 1");
  REQUIRE(node1.size() == 1);
  auto stopped = std::chrono::steady_clock::now();
  REQUIRE(::kill(node1[0], SIGSTOP) == 0); // alive, connected, silent
  launch.wait_for("lost node 1", 10s);
  auto noticed = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  int code = launch.wait(15s);
  auto ended = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  MESSAGE("noticed after " << noticed << " s, ended after " << ended << " s; exit code " << code);
  CHECK(noticed < 5.0);
  // The run ends as the message says, not after a wait for the silent node to
  // act on stop (it ended 16 s after SIGSTOP while saying "no heartbeat for 4 s").
  CHECK(ended < 10.0);
  CHECK(code == 1);
  CHECK(slurp(launch.err).find("no heartbeat") != std::string::npos);
  std::this_thread::sleep_for(200ms);
  CHECK(processes_with("--coordinator " + coordinator).empty());
  fs::remove_all(dir);
}

TEST_CASE("garbage and a wrong token sent to the coordinator are refused, logged, and the run still completes") {
  auto dir = make_graph("garbage", 400, "cluster: {launcher: local, nodes: 2}\n");
  troupe_process launch{dir,
                        {"launch", (dir / "graph.yaml").string(), "--summary-json", (dir / "summary.json").string()}};
  auto coordinator = launch.wait_for(R"(coordinator on (127\.0\.0\.1:\d+))");
  auto port = static_cast<std::uint16_t>(std::stoi(coordinator.substr(coordinator.rfind(':') + 1)));
  auto node_port =
    static_cast<std::uint16_t>(std::stoi(launch.wait_for(R"(node 1: channels listen on 127\.0\.0\.1:(\d+))")));
  // Random bytes and a truncated header, from raw sockets, to the coordinator
  // and to a node's channel port.
  std::mt19937 rng{42};
  for (int round = 0; round < 6; ++round) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(round < 3 ? port : node_port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    std::vector<unsigned char> junk(round % 3 == 2 ? 8 : 4096);
    for (auto& b : junk)
      b = static_cast<unsigned char>(round % 3 == 2 ? 0xff : rng());
    (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(100ms);
    ::close(fd);
  }
  // A well-formed client with the wrong token.
  troupe::net::handlers h;
  h.on_frame = [](troupe::net::connection&, troupe::net::frame&&) {};
  h.on_close = [](troupe::net::connection&, std::string) {};
  auto intruder = troupe::net::connect(
    {troupe::net::transport_kind::tcp, "127.0.0.1", port, "not-the-token", {}, 5000ms}, std::move(h));
  REQUIRE_FALSE(intruder);
  CHECK(troupe::error_message(intruder.error()).find("refused the connection: wrong token") != std::string::npos);
  CHECK(launch.wait(120s) == 0);
  auto err = slurp(launch.err);
  MESSAGE(err);
  CHECK(err.find("refused connection") != std::string::npos);
  CHECK(err.find("troupe launch: rejected connection") != std::string::npos);
  CHECK(err.find("troupe node 1: rejected connection") != std::string::npos);
  CHECK(nlohmann::json::parse(slurp(dir / "summary.json")).at("steps").get<int>() == 400);
  fs::remove_all(dir);
}

TEST_CASE("the coordinator listens only on the configured address") {
  auto dir = make_graph("address", 100000, "cluster: {launcher: local, nodes: 2, address: 127.0.0.1}\n");
  troupe_process launch{dir, {"launch", (dir / "graph.yaml").string()}};
  auto coordinator = launch.wait_for(R"(coordinator on (127\.0\.0\.1:\d+))");
  auto port = std::stoi(coordinator.substr(coordinator.rfind(':') + 1));
  // /proc/net/tcp lists listening sockets (state 0A) as HEXADDR:HEXPORT.
  char want[32];
  std::snprintf(want, sizeof want, "0100007F:%04X", port);
  auto table = slurp("/proc/net/tcp");
  bool loopback_listener = false, wildcard_listener = false;
  std::istringstream lines{table};
  for (std::string line; std::getline(lines, line);) {
    std::istringstream f{line};
    std::string slot, local, remote, state;
    f >> slot >> local >> remote >> state;
    if (state != "0A")
      continue;
    char port_hex[8];
    std::snprintf(port_hex, sizeof port_hex, ":%04X", port);
    if (local == want)
      loopback_listener = true;
    else if (local.size() > 5 && local.substr(local.size() - 5) == port_hex)
      wildcard_listener = true;
  }
  CHECK(loopback_listener);
  CHECK_FALSE(wildcard_listener);
  fs::remove_all(dir);
}
