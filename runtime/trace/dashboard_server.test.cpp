// The dashboard server over real sockets: static files, /metrics, the
// read-only rule, and the WebSocket feed of a 64-actor, 100,000-span trace.
#include "runtime/trace/dashboard_server.hpp"

#include <chrono>
#include <fstream>
#include <thread>

#include <boost/beast.hpp>
#include <string>
#include <unistd.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "runtime/trace/trace.hpp"
#include "tests/dashboard_client.hpp"

using namespace troupe;
using namespace troupe::testing;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

/// 64 actors in a chain, each with spans alternating forward and backward, and flows down the chain.
trace_snapshot synthetic(std::size_t actors, std::size_t spans) {
  trace_snapshot t;
  for (std::size_t a = 0; a < actors; ++a)
    t.actors.push_back({static_cast<std::uint16_t>(a), "stage" + std::to_string(a), "pipeline_stage", 0, "stage"});
  for (std::size_t i = 0; i < spans; ++i) {
    span s;
    s.actor = static_cast<std::uint16_t>(i % actors);
    auto k = i / actors;
    s.kind = k % 2 ? span_kind::backward : span_kind::forward;
    s.begin_ns = static_cast<std::int64_t>(k * 1'000'000 + s.actor * 1000);
    s.end_ns = s.begin_ns + 600'000;
    s.step = static_cast<std::int32_t>(k / 16), s.microbatch = static_cast<std::int32_t>(k % 16);
    t.spans.push_back(s);
  }
  t.counters.push_back({5'000'000, "loss", 3.25, 0});
  return t;
}

struct fixture_dir {
  std::filesystem::path path =
    std::filesystem::temp_directory_path() / (std::string{"troupe-dash-test"} + "_" + std::to_string(::getpid()));
  fixture_dir() {
    std::filesystem::create_directories(path);
    std::ofstream(path / "index.html") << "<!doctype html><title>troupe</title>";
  }
  ~fixture_dir() { std::filesystem::remove_all(path); }
};

/// Reads WebSocket frames until `spans` spans arrived (or the feed says it finished and all came).
std::size_t read_feed(const std::string& url, std::size_t spans, nlohmann::json& last_stats,
                      std::chrono::seconds limit) {
  feed_connection feed{url};
  auto& ws = feed.ws;
  std::size_t got = 0;
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (got < spans && std::chrono::steady_clock::now() < deadline) {
    beast::flat_buffer buf;
    ws.read(buf);
    auto j = nlohmann::json::parse(beast::buffers_to_string(buf.data()));
    if (j.contains("spans"))
      got += j["spans"].size() / 6;
    if (j.contains("stats"))
      last_stats = j["stats"];
  }
  ws.close(beast::websocket::close_code::normal);
  return got;
}

} // namespace

TEST_CASE("a finished 64-actor trace of 100,000 spans reaches a viewer whole and quickly") {
  fixture_dir dir;
  dashboard_options o;
  o.address = "127.0.0.1:0";
  o.static_dir = dir.path;
  auto srv = dashboard_server::start_snapshot(synthetic(64, 100'000), o);
  REQUIRE(srv);
  auto t0 = std::chrono::steady_clock::now();
  nlohmann::json stats;
  CHECK(read_feed((*srv)->url(), 100'000, stats, std::chrono::seconds(30)) == 100'000);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  REQUIRE(stats.is_object());
  CHECK(stats["actors"].size() == 64);
  CHECK(stats["loss"] == 3.25);
}

TEST_CASE("the server serves the page and metrics, and nothing but reads") {
  fixture_dir dir;
  dashboard_options o;
  o.address = "127.0.0.1:0";
  o.static_dir = dir.path;
  auto srv = dashboard_server::start_snapshot(synthetic(4, 400), o);
  REQUIRE(srv);
  auto url = (*srv)->url();
  CHECK(url.starts_with("http://127.0.0.1:"));
  auto page = http_request(url, http::verb::get, "/");
  CHECK(page.result() == http::status::ok);
  CHECK(page.body().find("<title>troupe</title>") != std::string::npos);
  auto metrics = http_request(url, http::verb::get, "/metrics");
  CHECK(metrics.result() == http::status::ok);
  CHECK(metrics.body().find("troupe_actor_busy_fraction{actor=\"stage3\"") != std::string::npos);
  CHECK(metrics.body().find("troupe_loss 3.25") != std::string::npos);
  CHECK(http_request(url, http::verb::post, "/metrics").result() == http::status::method_not_allowed);
  CHECK(http_request(url, http::verb::get, "/../../etc/passwd").result() == http::status::not_found);
  CHECK(http_request(url, http::verb::get, "/api/summary").body().find("stage0") != std::string::npos);
}

TEST_CASE("/metrics and the feed carry each stage's step times and rank the chronic straggler first") {
  // Two replicas of two positions, 30 steps: r1s1 takes 3x its replica every
  // step; r0s0 stalls 20x in step 12 only.
  trace_snapshot t;
  const char* names[] = {"r0s0", "r0s1", "r1s0", "r1s1"};
  for (std::uint16_t a = 0; a < 4; ++a)
    t.actors.push_back({a, names[a], "pipeline_stage", 0, "stage", a % 2});
  std::int64_t clock = 0;
  for (std::int32_t step = 0; step < 30; ++step)
    for (std::uint16_t a = 0; a < 4; ++a) {
      span s;
      s.actor = a, s.kind = span_kind::forward, s.step = step, s.microbatch = 0;
      auto ms = a == 3 ? 3 : a == 0 && step == 12 ? 20 : 1;
      s.begin_ns = clock, s.end_ns = clock + ms * 1'000'000;
      clock = s.end_ns;
      t.spans.push_back(s);
    }
  fixture_dir dir;
  dashboard_options o;
  o.address = "127.0.0.1:0";
  o.static_dir = dir.path;
  auto srv = dashboard_server::start_snapshot(t, o);
  REQUIRE(srv);
  auto m = http_request((*srv)->url(), http::verb::get, "/metrics").body();
  CHECK(m.find("# TYPE troupe_actor_step_ms gauge") != std::string::npos);
  CHECK(m.find("troupe_actor_step_ms{actor=\"r1s1\",stat=\"median\"} 3\n") != std::string::npos);
  CHECK(m.find("troupe_actor_step_ms{actor=\"r0s0\",stat=\"max\"} 20\n") != std::string::npos);
  CHECK(m.find("troupe_actor_step_ms{actor=\"r0s0\",stat=\"min\"} 1\n") != std::string::npos);
  CHECK(m.find("troupe_straggler_rank{actor=\"r1s1\"} 1\n") != std::string::npos);
  CHECK(m.find("troupe_actor_chronic_straggler{actor=\"r1s1\"} 1\n") != std::string::npos);
  CHECK(m.find("troupe_actor_chronic_straggler{actor=\"r0s0\"} 0\n") != std::string::npos);
  CHECK(m.find("troupe_actor_step_ewma{actor=\"r1s1\"} 2.9") != std::string::npos);
  nlohmann::json stats;
  read_feed((*srv)->url(), t.spans.size(), stats, std::chrono::seconds(10));
  REQUIRE(stats.contains("stragglers"));
  CHECK(stats["stragglers"]["top"][0] == "r1s1");
  CHECK(stats["stragglers"]["actors"]["r0s0"]["stalls"] == nlohmann::json::array({12}));
}

TEST_CASE("a page that was never built is answered with how to build it") {
  dashboard_options o;
  o.address = "127.0.0.1:0";
  o.static_dir = "/nonexistent/dashboard";
  auto srv = dashboard_server::start_snapshot(synthetic(2, 10), o);
  REQUIRE(srv);
  auto page = http_request((*srv)->url(), http::verb::get, "/");
  CHECK(page.result() == http::status::service_unavailable);
  CHECK(page.body().find("npm run build") != std::string::npos);
}

TEST_CASE("the live feed streams spans as the recorder gathers them") {
  auto& r = trace_recorder::global();
  r.reset();
  r.enable(4096);
  auto a = r.register_actor("live0", "pipeline_stage");
  dashboard_options o;
  o.address = "127.0.0.1:0";
  o.interval = std::chrono::milliseconds(20);
  auto srv = dashboard_server::start_live(o);
  REQUIRE(srv);
  for (int i = 0; i < 500; ++i) {
    scoped_span s(a, span_kind::forward, 0, i);
  }
  r.count("loss", 4.0, 0);
  nlohmann::json stats;
  CHECK(read_feed((*srv)->url(), 500, stats, std::chrono::seconds(10)) == 500);
  auto m = http_request((*srv)->url(), http::verb::get, "/metrics").body();
  CHECK(m.find("troupe_actor_busy_fraction{actor=\"live0\"") != std::string::npos);
  (*srv)->stop();
  r.disable();
  r.reset();
}

TEST_CASE("an address that is taken is an error naming it") {
  dashboard_options o;
  o.address = "127.0.0.1:0";
  auto first = dashboard_server::start_snapshot(synthetic(1, 1), o);
  REQUIRE(first);
  o.address = (*first)->url().substr(7, (*first)->url().size() - 8);
  auto second = dashboard_server::start_snapshot(synthetic(1, 1), o);
  REQUIRE_FALSE(second);
}

TEST_CASE("batches ingested from two nodes keep their actors apart and drop spans of actors never named") {
  dashboard_options o;
  o.address = "127.0.0.1:0";
  o.interval = std::chrono::milliseconds(20);
  auto srv = dashboard_server::start_ingest(o);
  REQUIRE(srv);
  auto now = trace_now();
  for (int node = 0; node < 2; ++node) {
    // Both nodes number their actors from 0 and both have a `to s2`.
    trace_snapshot b;
    b.actors = {{0, "to s2", "channel", 0}, {1, node == 0 ? "s1" : "s2", "pipeline_stage", 0}};
    for (int i = 0; i < 200; ++i) {
      span s;
      s.actor = static_cast<std::uint16_t>(i % 2);
      s.kind = span_kind::forward;
      s.begin_ns = now - 1'000'000 + i * 1000, s.end_ns = s.begin_ns + 500;
      b.spans.push_back(s);
    }
    span orphan;
    orphan.actor = 7; // named by no batch
    b.spans.insert(b.spans.end(), 5, orphan);
    b.dropped = 3 + static_cast<std::uint64_t>(node);
    (*srv)->ingest(node, b);
  }
  nlohmann::json stats;
  CHECK(read_feed((*srv)->url(), 400, stats, std::chrono::seconds(10)) == 400);
  std::string m;
  for (int i = 0; i < 100 && m.find("troupe_trace_dropped_spans_total 17") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    m = http_request((*srv)->url(), http::verb::get, "/metrics").body();
  }
  CHECK(m.find("troupe_trace_dropped_spans_total 17") != std::string::npos); // 3 + 4 reported, 10 orphans
  CHECK(m.find(R"(troupe_actor_busy_fraction{actor="to s2",type="channel",node="0"})") != std::string::npos);
  CHECK(m.find(R"(troupe_actor_busy_fraction{actor="to s2",type="channel",node="1"})") != std::string::npos);
  CHECK(m.find(R"(troupe_actor_busy_fraction{actor="s2",type="pipeline_stage",node="1"})") != std::string::npos);
  (*srv)->stop();
}
