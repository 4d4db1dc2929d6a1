// Trace recording from many threads and its Chrome Trace Event export.
#include "runtime/trace/trace.hpp"

#include <cmath>
#include <thread>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "runtime/trace/trace_export.hpp"

using namespace troupe;

namespace {

span make_span(std::uint16_t actor, std::int64_t t, span_kind k, int mb) {
  span s;
  s.actor = actor, s.kind = k, s.microbatch = mb, s.step = 0;
  s.begin_ns = t, s.end_ns = t + 500;
  return s;
}

} // namespace

TEST_CASE("spans recorded on several threads all reach the snapshot") {
  auto& r = trace_recorder::global();
  r.reset();
  r.enable(1024);
  auto a = r.register_actor("s0", "pipeline_stage");
  auto b = r.register_actor("s1", "pipeline_stage", 1);
  std::thread t1([&] {
    for (int i = 0; i < 300; ++i)
      r.record(make_span(a, i * 1000, span_kind::forward, i));
  });
  std::thread t2([&] {
    for (int i = 0; i < 200; ++i)
      r.record(make_span(b, i * 1000, span_kind::backward, i));
  });
  t1.join(), t2.join();
  auto t = snapshot_trace();
  CHECK(t.spans.size() == 500);
  CHECK(t.dropped == 0);
  r.disable();
}

TEST_CASE("a full ring buffer keeps the newest spans and counts the dropped ones") {
  auto& r = trace_recorder::global();
  r.reset();
  r.enable(64);
  auto a = r.register_actor("s0", "pipeline_stage");
  std::thread t([&] {
    for (int i = 0; i < 1000; ++i)
      r.record(make_span(a, i * 1000, span_kind::forward, i));
  });
  t.join();
  auto snap = snapshot_trace();
  CHECK(snap.spans.size() == 64);
  CHECK(snap.dropped == 936);
  CHECK(snap.spans.back().microbatch == 999);
  r.disable();
}

TEST_CASE("a reader that keeps up misses nothing however often a ring wraps; one that falls behind counts its loss") {
  auto& r = trace_recorder::global();
  r.reset();
  r.enable(64);
  auto a = r.register_actor("s0", "pipeline_stage");
  trace_recorder::cursor keeps_up, falls_behind;
  std::vector<span> got, late;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 50; ++i)
      r.record(make_span(a, (round * 50 + i) * 1000, span_kind::forward, i));
    r.collect(keeps_up, got);
  }
  r.collect(falls_behind, late);
  CHECK(got.size() == 1000);
  CHECK(keeps_up.missed == 0);
  CHECK(late.size() == 64);
  CHECK(falls_behind.missed == 936);
  r.disable();
}

TEST_CASE("the exported JSON names every actor, closes every span and keeps time monotonic per thread") {
  auto& r = trace_recorder::global();
  r.reset();
  r.enable(4096);
  auto a = r.register_actor("loader \"main\"", "data_loader");
  auto b = r.register_actor("s0", "pipeline_stage");
  std::thread w([&] {
    for (int i = 20; i-- > 0;) { // recorded out of order on purpose
      auto s = make_span(a, i * 2000, span_kind::send, i);
      s.flow = 100 + static_cast<std::uint64_t>(i);
      r.record(s);
      auto q = make_span(b, i * 2000 + 700, span_kind::receive, i);
      q.flow = s.flow, q.flow_end = 1;
      r.record(q);
    }
  });
  w.join();
  r.count("loss", 5.5, 0);
  r.count("loss", NAN, 1); // a diverged run still exports valid JSON
  auto j = nlohmann::json::parse(to_chrome_json(snapshot_trace()));
  std::map<int, std::string> names;
  std::map<int, double> last_ts;
  int complete = 0, flows = 0, counters = 0;
  for (const auto& e : j.at("traceEvents")) {
    auto ph = e.at("ph").get<std::string>();
    if (ph == "M" && e.at("name") == "thread_name") {
      names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
      CHECK_FALSE(e.at("args").at("type").get<std::string>().empty());
    }
    if (ph == "X") {
      ++complete;
      CHECK(e.at("dur").get<double>() >= 0);
      CHECK_FALSE(e.at("name").get<std::string>().empty());
      auto tid = e.at("tid").get<int>();
      auto ts = e.at("ts").get<double>();
      CHECK(ts >= last_ts[tid]);
      last_ts[tid] = ts;
    }
    if (ph == "s" || ph == "f") {
      ++flows;
      CHECK(e.at("cat") == "message");
    }
    counters += ph == "C";
  }
  CHECK(names.at(a) == "loader \"main\"");
  CHECK(names.at(b) == "s0");
  CHECK(complete == 40);
  CHECK(flows == 40);
  CHECK(counters == 2);
  r.disable();
}

TEST_CASE("counted mailbox depth rises with each send and falls with each receive") {
  auto& r = trace_recorder::global();
  r.reset();
  auto a = r.register_actor("s1", "pipeline_stage");
  CHECK(r.actor_id("s1") == a);
  CHECK_FALSE(r.actor_id("nobody"));
  for (int i = 0; i < 3; ++i)
    r.message_sent(a);
  CHECK(r.message_received(a) == 3);
  CHECK(r.message_received(a) == 2);
  r.message_sent(a);
  CHECK(r.message_received(a) == 2);
  CHECK(r.message_received(a) == 1);
}
