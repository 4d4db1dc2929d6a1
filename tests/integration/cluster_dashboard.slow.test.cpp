// `troupe launch --dashboard` with two local nodes: one dashboard on the
// coordinator shows the actors of both nodes, each with its spans, on one clock.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include <boost/beast.hpp>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/dashboard_client.hpp"
#include "tests/integration/troupe_process.hpp"

namespace fs = std::filesystem;
namespace beast = boost::beast;
namespace http = beast::http;
using namespace std::chrono_literals;
using namespace troupe::testing;

namespace {

/// What a dashboard viewer has seen so far.
struct viewer {
  std::map<int, nlohmann::json> actors; ///< by the feed's id
  std::map<int, std::size_t> spans;     ///< per actor id
  /// The first forward of step 0, microbatch 0, per actor: [begin, end] in µs.
  std::map<int, std::pair<double, double>> first_forward;
  bool finished = false;

  void take(const nlohmann::json& f) {
    if (f.contains("actors"))
      for (const auto& a : f["actors"])
        actors[a["id"].get<int>()] = a;
    if (f.contains("spans")) {
      const auto& s = f["spans"];
      for (std::size_t i = 0; i + 5 < s.size(); i += 6) {
        int id = s[i].get<int>();
        ++spans[id];
        if (s[i + 1].get<int>() == 0 && s[i + 4].get<int>() == 0 && s[i + 5].get<int>() == 0) {
          double b = s[i + 2].get<double>(), d = s[i + 3].get<double>();
          if (!first_forward.count(id) || b < first_forward[id].first)
            first_forward[id] = {b, b + d};
        }
      }
    }
    if (f.contains("finished"))
      finished = true;
  }
  /// The feed id of the actor `name` on `node`, or -1.
  int id_of(const std::string& name, int node) const {
    for (const auto& [id, a] : actors)
      if (a["name"] == name && a["node"] == node)
        return id;
    return -1;
  }
  /// Every pipeline stage of both nodes is known and has spans.
  bool sees_both_nodes() const {
    std::set<int> nodes;
    for (const auto& [id, a] : actors)
      if (a["type"] == "pipeline_stage") {
        if (!spans.count(id))
          return false;
        nodes.insert(a["node"].get<int>());
      }
    return nodes == std::set<int>{0, 1};
  }
};

} // namespace

namespace {

/// Launches a 4-stage pipeline over two local nodes (it would train for hours;
/// this stops it) with the dashboard, and checks what a viewer of it sees.
/// With `probe_clocks` the nodes act as if on other machines: their clock
/// offsets are estimated from probes rather than known to be zero.
void watch_launch(bool probe_clocks) {
  auto dir =
    small_pipeline_graph(probe_clocks ? "cdash_probe" : "cdash", 10000000, "cluster: {launcher: local, nodes: 2}\n");
  if (probe_clocks)
    ::setenv("TROUPE_CLOCK_DOMAIN", "", 1); // inherited by the launch and its nodes
  troupe_process launch{
    dir,
    {"launch", (dir / "graph.yaml").string(), "--dashboard", "127.0.0.1:0", "--trace", (dir / "trace.json").string()}};
  ::unsetenv("TROUPE_CLOCK_DOMAIN");
  auto url = launch.wait_for(R"(dashboard: (http://127\.0\.0\.1:\d+/))");
  feed_connection feed{url};
  auto& ws = feed.ws;
  viewer v;
  auto read_until = [&](auto done, std::chrono::seconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      beast::flat_buffer buf;
      beast::error_code ec;
      ws.read(buf, ec);
      if (ec)
        break;
      v.take(nlohmann::json::parse(beast::buffers_to_string(buf.data())));
    }
  };
  read_until([&] { return v.sees_both_nodes(); }, 120s);
  REQUIRE(v.sees_both_nodes());
  // Lanes are the node's own actors, named as the graph names them, never merged.
  for (auto [name, node] : {std::pair{"s0", 0}, {"s1", 0}, {"s2", 1}, {"s3", 1}}) {
    CAPTURE(name);
    int id = v.id_of(name, node);
    REQUIRE(id >= 0);
    CHECK(v.spans[id] > 0);
    CHECK(v.id_of(name, 1 - node) < 0);
  }
  std::set<int> ids;
  for (const auto& [id, a] : v.actors)
    ids.insert(id);
  CHECK(ids.size() == v.actors.size());
  // One clock: s2 (node 1) starts microbatch 0 of step 0 only after s1 (node 0)
  // finished it; exactly so on a shared clock, within the estimates' stated
  // error (half a probe's round trip, for each node) when probed.
  double tolerance_us = 0;
  if (probe_clocks)
    for (int node : {0, 1}) {
      auto within = launch.wait_for("node " + std::to_string(node) +
                                    R"( \(.*\) has its own clock: .* ms from this one, within ([0-9.]+) ms)");
      tolerance_us += std::stod(within) * 1000 + 1000; // and the printed rounding, generously
    }
  read_until([&] { return v.first_forward.count(v.id_of("s2", 1)) && v.first_forward.count(v.id_of("s1", 0)); }, 30s);
  auto s1 = v.first_forward.at(v.id_of("s1", 0)), s2 = v.first_forward.at(v.id_of("s2", 1));
  CAPTURE(tolerance_us);
  CHECK(s2.first >= s1.second - tolerance_us);
  CHECK(s2.first - s1.second < 5e6); // and not seconds later either
  // /metrics lists the actors of both nodes while the run goes on.
  std::string metrics;
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    metrics = http_request(url, http::verb::get, "/metrics").body();
    if (metrics.find(R"(troupe_actor_busy_fraction{actor="s3",type="pipeline_stage",node="1"})") != std::string::npos)
      break;
    std::this_thread::sleep_for(300ms);
  }
  CHECK(metrics.find(R"(troupe_actor_busy_fraction{actor="s0",type="pipeline_stage",node="0"})") != std::string::npos);
  CHECK(metrics.find(R"(troupe_actor_busy_fraction{actor="s3",type="pipeline_stage",node="1"})") != std::string::npos);
  // Stopping the launch finishes the feed, and each node still wrote its own trace.
  REQUIRE(::kill(launch.pid, SIGINT) == 0);
  read_until([&] { return v.finished; }, 30s);
  CHECK(v.finished);
  CHECK(launch.wait(30s) == 130);
  CHECK(fs::exists(dir / "trace.node0.json"));
  CHECK(fs::exists(dir / "trace.node1.json"));
  fs::remove_all(dir);
}

} // namespace

TEST_CASE("troupe launch --dashboard serves every actor of both nodes, with spans, on one clock") {
  watch_launch(false);
}

TEST_CASE("nodes whose clocks are not known to be shared are put on the coordinator's clock by probes") {
  watch_launch(true);
}
