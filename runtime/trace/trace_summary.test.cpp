// Summaries of traces: busy and idle time, bubble fraction, action orders,
// channels, throughput, and reading an exported trace back.
#include "runtime/trace/trace_summary.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <doctest/doctest.h>

#include "runtime/trace/dashboard_server.hpp"
#include "runtime/actor/errors.hpp"

using namespace troupe;

namespace {

span make(std::uint16_t actor, span_kind k, std::int64_t b, std::int64_t e, int step, int mb) {
  span s;
  s.actor = actor, s.kind = k, s.begin_ns = b, s.end_ns = e, s.step = step, s.microbatch = mb;
  return s;
}

span flow(std::uint16_t actor, std::int64_t t, std::uint64_t id, bool end) {
  auto s = make(actor, end ? span_kind::receive : span_kind::send, t, t, 0, 0);
  s.flow = id, s.flow_end = end, s.bytes = 1000;
  return s;
}

/// Two stages, GPipe-like over two microbatches: s0 busy 60 of 100 ns, s1 busy 40.
trace_snapshot two_stages() {
  trace_snapshot t;
  t.actors = {
    {0, "s0", "pipeline_stage", 0, "stage"}, {1, "s1", "pipeline_stage", 0, "stage"}, {2, "loader", "data_loader", 0}};
  t.spans = {make(0, span_kind::forward, 0, 10, 0, 0),
             make(0, span_kind::forward, 10, 20, 0, 1),
             make(1, span_kind::forward, 20, 30, 0, 0),
             make(1, span_kind::backward, 30, 40, 0, 0),
             make(1, span_kind::forward, 40, 50, 0, 1),
             make(1, span_kind::backward, 50, 60, 0, 1),
             make(0, span_kind::backward, 60, 80, 0, 0),
             make(0, span_kind::backward, 80, 90, 0, 1),
             make(0, span_kind::optimizer, 90, 100, 0, -1),
             flow(0, 10, 5, false),
             flow(1, 20, 5, true),
             flow(0, 20, 9, false)};
  t.counters = {{95, "loss", 2.5, 0}};
  return t;
}

} // namespace

TEST_CASE("busy time is the union of compute spans and the bubble is the stages' idle share") {
  auto s = summarize(two_stages());
  CHECK(s.begin_ns == 0);
  CHECK(s.end_ns == 100);
  REQUIRE(s.actors.size() == 3);
  CHECK(s.actors[0].busy_ns == 60);
  CHECK(s.actors[0].idle_ns == 40);
  CHECK(s.actors[1].busy_ns == 40);
  CHECK(*s.bubble_fraction == doctest::Approx(0.5));
  CHECK(s.last_step == 0);
  CHECK(*s.loss == 2.5);
}

TEST_CASE("stages are the actors whose trace role is stage, whatever their type is called") {
  auto t = two_stages();
  t.actors[0].type = t.actors[1].type = "my_plugin_stage";
  auto s = summarize(t);
  CHECK(*s.bubble_fraction == doctest::Approx(0.5));
  CHECK(s.orders.size() == 2);
  t.actors[1].role.clear(); // no longer a stage: the bubble is s0's idle share alone
  s = summarize(t);
  CHECK(*s.bubble_fraction == doctest::Approx(0.4));
  REQUIRE(s.orders.size() == 1);
  CHECK(s.orders[0].actions == "0F0 0F1 0B0 0B1");
}

TEST_CASE("each stage's action order per step reads like the schedule text") {
  auto s = summarize(two_stages());
  REQUIRE(s.orders.size() == 2);
  CHECK(s.orders[0].actions == "0F0 0F1 0B0 0B1");
  CHECK(s.orders[1].actions == "1F0 1B0 1F1 1B1");
  auto text = to_text(s);
  CHECK(text.find("s0           step 1: 0F0 0F1 0B0 0B1") != std::string::npos);
  CHECK(text.find("pipeline bubble fraction: 50.0%") != std::string::npos);
}

TEST_CASE("each distinct action order of a stage prints once, with the steps that ran it") {
  // Six steps of the two-stage run; in step 4 (index 3) s1 runs its microbatches the other way round.
  auto one = two_stages();
  trace_snapshot t;
  t.actors = one.actors;
  for (int step = 0; step < 6; ++step)
    for (auto s : one.spans) {
      s.step = step, s.begin_ns += step * 1000, s.end_ns += step * 1000;
      if (step == 3 && s.actor == 1 && action_letter(s.kind))
        s.microbatch = 1 - s.microbatch;
      t.spans.push_back(s);
    }
  auto s = summarize(t);
  CHECK(s.orders.size() == 12); // per stage and step, as before
  auto d = distinct_orders(s.orders);
  REQUIRE(d.size() == 3);
  CHECK(d[0].actions == "0F0 0F1 0B0 0B1");
  CHECK(d[0].steps == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5});
  CHECK(d[1].actions == "1F0 1B0 1F1 1B1");
  CHECK(d[1].steps == std::vector<std::int32_t>{0, 1, 2, 4, 5});
  CHECK(d[2].actions == "1F1 1B1 1F0 1B0");
  CHECK(d[2].steps == std::vector<std::int32_t>{3});
  auto text = to_text(s);
  CHECK(text.find("  s0           steps 1-6: 0F0 0F1 0B0 0B1\n") != std::string::npos);
  CHECK(text.find("  s1           steps 1-3, 5-6: 1F0 1B0 1F1 1B1\n") != std::string::npos);
  CHECK(text.find("  s1           step 4: 1F1 1B1 1F0 1B0\n") != std::string::npos);
  std::size_t lines = 0;
  for (auto at = text.find("0F0 0F1 0B0 0B1"); at != std::string::npos; at = text.find("0F0 0F1 0B0 0B1", at + 1))
    ++lines;
  CHECK(lines == 1);
}

TEST_CASE("steps print as 1-based ranges") {
  CHECK(step_ranges({0, 1, 2, 4, 5}) == "steps 1-3, 5-6");
  CHECK(step_ranges({49}) == "step 50");
  CHECK(step_ranges({0, 2, 4}) == "steps 1, 3, 5");
  CHECK(step_ranges({0, 1}) == "steps 1-2");
}

TEST_CASE(
  "only pipeline stages have a bubble: the loader's idle time is not one, and the mailbox column is explained") {
  auto t = two_stages();
  t.spans[0].mailbox = 3, t.spans[1].mailbox = 1; // s0 took a message while two more waited
  auto s = summarize(t);
  CHECK(s.actors[0].mailbox_max == 3);
  auto text = to_text(s);
  auto row = [&](const std::string& name) {
    auto at = text.find("\n" + name + " ");
    REQUIRE(at != std::string::npos);
    return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  };
  // actor, type, busy s, idle s, busy %, bubble %, spans, mailbox
  CHECK(row("loader").find(" - ") != std::string::npos);
  CHECK(row("s0").find(" 40.0 ") != std::string::npos);
  CHECK(row("s0").ends_with(" 3"));
  CHECK(text.find("mailbox: the most data messages waiting for the actor at once") != std::string::npos);
  CHECK(text.find("bubble %: a pipeline stage's idle share") != std::string::npos);
  // With no stage at all there is no pipeline, so no bubble: not the loader's idle share.
  for (auto& a : t.actors)
    a.role.clear();
  s = summarize(t);
  CHECK_FALSE(s.bubble_fraction);
  CHECK(to_text(s).find("pipeline bubble fraction: -") != std::string::npos);
}

TEST_CASE("a trace file's validation losses read back with their steps, the one before training as step -1") {
  auto t = two_stages();
  for (auto& s : t.spans)
    s.begin_ns += 1000, s.end_ns += 1000;
  t.spans.push_back(make(1, span_kind::eval, 0, 5, -1, 0));      // the validation before training
  t.spans.push_back(make(1, span_kind::eval, 1101, 1105, 0, 0)); // after step 1
  t.counters = {{6, "val_loss", 5.5, -1}, {1095, "loss", 2.5, 0}, {1106, "val_loss", 2.7, 0}};
  auto back = parse_chrome_trace(to_chrome_json(t), "val.json");
  REQUIRE(back);
  REQUIRE(back->counters.size() == 3);
  CHECK(back->counters[0].step == -1);
  CHECK(back->counters[1].step == 0);
  CHECK(back->counters[2].step == 0);
  auto s = summarize(*back);
  CHECK(s.val_step == 0);
  CHECK(*s.val_loss == 2.7);
}

TEST_CASE("the summary says which step the latest validation loss is from") {
  auto t = two_stages();
  t.counters.push_back({97, "val_loss", 2.7, 0});
  auto s = summarize(t);
  CHECK(s.val_step == 0);
  CHECK(to_text(s).find("val loss 2.7000 (after step 1)") != std::string::npos);
}

TEST_CASE("flows make channels, and a send on a known route with no receive is in flight") {
  auto s = summarize(two_stages());
  REQUIRE(s.channels.size() == 1);
  CHECK(s.channels[0].from == 0);
  CHECK(s.channels[0].to == 1);
  CHECK(s.channels[0].messages == 1);
  CHECK(s.channels[0].bytes == 1000);
  // Flow 9 differs from flow 5 only in the microbatch bits: same route, so s1 has one message waiting.
  auto t = two_stages();
  t.spans.back().flow = 5 + 4;
  s = summarize(t);
  CHECK(s.channels[0].in_flight == 1);
  CHECK(s.actors[1].mailbox == 1);
}

TEST_CASE("a window clips spans to it") {
  auto s = summarize(two_stages(), 0, 50, false);
  CHECK(s.actors[0].busy_ns == 20);
  CHECK(s.actors[1].busy_ns == 30);
  CHECK(s.orders.empty());
}

TEST_CASE("tokens per second come from the time between consecutive losses") {
  throughput_meter m{1000};
  CHECK_FALSE(m.on_sample({1'000'000'000, "loss", 3.0, 0}));
  auto r = m.on_sample({1'500'000'000, "loss", 2.9, 1});
  REQUIRE(r);
  CHECK(r->name == "tokens_per_s");
  CHECK(r->value == doctest::Approx(2000.0));
  CHECK(r->step == 1);
  CHECK_FALSE(m.on_sample({1'600'000'000, "val_loss", 2.9, 1}));
}

TEST_CASE("an exported trace reads back with its actors, spans, flows and counters") {
  auto t = two_stages();
  auto back = parse_chrome_trace(to_chrome_json(t), "mem.json");
  REQUIRE(back);
  REQUIRE(back->actors.size() == 3);
  CHECK(back->actors[2].name == "loader");
  CHECK(back->actors[0].type == "pipeline_stage");
  CHECK(back->actors[0].role == "stage");
  CHECK(back->actors[2].role.empty());
  CHECK(back->spans.size() == t.spans.size());
  CHECK(back->counters.size() == 1);
  CHECK(back->counters[0].step == 0); // from the optimizer span begun before it
  auto a = summarize(t), b = summarize(*back);
  CHECK(*b.bubble_fraction == doctest::Approx(*a.bubble_fraction));
  CHECK(b.orders[0].actions == a.orders[0].actions);
  REQUIRE(b.channels.size() == 1);
  CHECK(b.channels[0].messages == 1);
}

TEST_CASE("a trace written before actors carried a role still finds its stages by the passes they ran") {
  auto json = to_chrome_json(two_stages());
  for (const char* role : {R"(,"role":"stage")", R"(,"role":"")"})
    for (auto at = json.find(role); at != std::string::npos; at = json.find(role))
      json.erase(at, std::string_view{role}.size());
  REQUIRE(json.find("\"role\"") == std::string::npos);
  auto back = parse_chrome_trace(json, "old.json");
  REQUIRE(back);
  CHECK(back->actors[0].role == "stage");
  CHECK(back->actors[1].role == "stage");
  CHECK(back->actors[2].role.empty());
  CHECK(*summarize(*back).bubble_fraction == doctest::Approx(0.5));
}

TEST_CASE("a file that is not a trace is an error that says where") {
  auto r = parse_chrome_trace("{\"traceEvents\": [{\"ph\": \"X\", \"pid\": 0, \"tid\": 0}]}", "bad.json");
  REQUIRE_FALSE(r);
  auto text = error_message(r.error());
  CHECK(text.find("bad.json: traceEvents[0]") != std::string::npos);
  CHECK_FALSE(parse_chrome_trace("not json", "x.json"));
  CHECK_FALSE(parse_chrome_trace("{\"events\": []}", "x.json"));
  CHECK_FALSE(read_chrome_trace("/nonexistent/trace.json"));
}

TEST_CASE("metrics are Prometheus text with one busy and mailbox line per actor") {
  auto text = prometheus_metrics(summarize(two_stages()));
  CHECK(text.find("# TYPE troupe_step gauge\ntroupe_step 1\n") != std::string::npos);
  CHECK(text.find("troupe_loss 2.5\n") != std::string::npos);
  CHECK(text.find("troupe_tokens_per_second NaN\n") != std::string::npos);
  CHECK(text.find("troupe_actor_busy_fraction{actor=\"s0\",type=\"pipeline_stage\",node=\"0\"} 0.6\n") !=
        std::string::npos);
  CHECK(text.find("troupe_actor_mailbox_depth{actor=\"loader\",type=\"data_loader\",node=\"0\"} 0\n") !=
        std::string::npos);
}

TEST_CASE("listen addresses default to the loopback interface and port 8080") {
  CHECK(*parse_listen_address("") == std::pair<std::string, std::uint16_t>{"127.0.0.1", 8080});
  CHECK(*parse_listen_address(":9000") == std::pair<std::string, std::uint16_t>{"127.0.0.1", 9000});
  CHECK(*parse_listen_address("9001") == std::pair<std::string, std::uint16_t>{"127.0.0.1", 9001});
  CHECK(*parse_listen_address("0.0.0.0:80") == std::pair<std::string, std::uint16_t>{"0.0.0.0", 80});
  CHECK(*parse_listen_address("localhost") == std::pair<std::string, std::uint16_t>{"localhost", 8080});
  CHECK_FALSE(parse_listen_address("host:99999"));
  CHECK_FALSE(parse_listen_address("host:abc"));
}

TEST_CASE("each replica's own loss is its latest loss:rN counter, a troupe_replica_loss gauge in the metrics") {
  auto t = two_stages();
  t.counters.push_back({100, "loss:r0", 2.75, 0});
  t.counters.push_back({100, "loss:r1", 2.25, 0});
  t.counters.push_back({200, "loss:r1", 2.125, 1});
  auto s = summarize(t);
  CHECK(s.replica_loss == std::map<int, double>{{0, 2.75}, {1, 2.125}});
  auto text = prometheus_metrics(s);
  CHECK(text.find("# TYPE troupe_replica_loss gauge\ntroupe_replica_loss{replica=\"0\"} 2.75\n"
                  "troupe_replica_loss{replica=\"1\"} 2.125\n") != std::string::npos);
  // Without replicas there is no such gauge.
  CHECK(prometheus_metrics(summarize(two_stages())).find("troupe_replica_loss") == std::string::npos);
}

TEST_CASE("each sync actor's outer steps and exchange bytes are its latest outer: counters, gauges in the metrics") {
  auto t = two_stages();
  t.counters.push_back({100, "outer:r0s0_sync:steps", 1, 49});
  t.counters.push_back({100, "outer:r0s0_sync:bytes", 4096, 49});
  t.counters.push_back({200, "outer:r0s0_sync:steps", 2, 99});
  t.counters.push_back({200, "outer:r0s0_sync:bytes", 8192, 99});
  t.counters.push_back({200, "outer:r1s0_sync:steps", 2, 99});
  auto s = summarize(t);
  REQUIRE(s.outer.size() == 2);
  CHECK(s.outer["r0s0_sync"].steps == 2);
  CHECK(s.outer["r0s0_sync"].bytes == 8192);
  auto text = prometheus_metrics(s);
  CHECK(text.find("troupe_outer_steps{actor=\"r0s0_sync\"} 2\ntroupe_outer_steps{actor=\"r1s0_sync\"} 2\n") !=
        std::string::npos);
  CHECK(text.find("troupe_outer_bytes_sent{actor=\"r0s0_sync\"} 8192\n") != std::string::npos);
  CHECK(prometheus_metrics(summarize(two_stages())).find("troupe_outer") == std::string::npos);
}

TEST_CASE("a launched run's node files read as one trace: actors apart, times on one clock, one pipeline bubble") {
  // `trace summarize X.json` found nothing: a launch writes X.node0.json and X.node1.json.
  auto dir = std::filesystem::temp_directory_path() / ("troupe_nodes_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto node = [&](int i, const char* name, std::int64_t epoch_ns) {
    trace_snapshot t;
    t.actors = {{0, name, "pipeline_stage", 0, "stage"}};
    t.spans = {make(0, span_kind::forward, 0, 10'000'000, 0, 0)};
    t.epoch_ns = epoch_ns;
    std::ofstream(dir / ("t.node" + std::to_string(i) + ".json")) << to_chrome_json(t);
  };
  node(0, "s0", 1'000'000'000);
  node(1, "s1", 1'005'000'000); // started 5 ms later: its time 0 is 5 ms into node 0's
  auto t = read_chrome_trace(dir / "t.json");
  REQUIRE(t);
  REQUIRE(t->actors.size() == 2);
  CHECK(t->actors[0].name == "s0");
  CHECK(t->actors[1].name == "s1");
  CHECK(t->actors[1].id == 1);
  CHECK(t->actors[1].node == 1);
  REQUIRE(t->spans.size() == 2);
  CHECK(t->spans[1].actor == 1);
  CHECK(t->spans[1].begin_ns == 5'000'000);
  auto s = summarize(*t);
  REQUIRE(s.bubble_fraction);
  CHECK(*s.bubble_fraction == doctest::Approx(1.0 / 3)); // 20 ms busy of 2 stages x 15 ms
  std::filesystem::remove_all(dir);
}
