// The streaming trace file: every span of a run longer than a ring holds, a
// valid file after every flush, a file cut mid-event still read, a file
// removed during the run written again.
#include "runtime/trace/trace_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/actor/errors.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in{p, std::ios::binary};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A fresh recorder with rings of `ring` spans, one stage actor, and a writer
/// into a temporary file that flushes only when the test says.
struct streamed_run {
  trace_recorder& r = trace_recorder::global();
  fs::path file;
  std::unique_ptr<trace_writer> w;
  std::uint16_t actor = 0;

  streamed_run(const char* name, std::size_t ring, std::int64_t tokens_per_step = 0) {
    r.reset();
    r.enable(ring);
    auto dir = fs::temp_directory_path() / fmt::format("troupe_trace_writer_{}", ::getpid());
    fs::create_directories(dir);
    file = dir / name;
    auto opened = trace_writer::open(file, tokens_per_step, std::chrono::hours{1});
    REQUIRE(opened);
    w = std::move(*opened);
    actor = r.register_actor("s0", "pipeline_stage", 0, "stage");
  }
  ~streamed_run() {
    w.reset();
    r.disable();
    fs::remove_all(file.parent_path());
  }
};

/// Records `n` spans of `actor` in `step` into this thread's ring.
void record_step(std::uint16_t actor, int n, int step) {
  for (int i = 0; i < n; ++i) {
    span s;
    s.actor = actor, s.kind = i % 2 ? span_kind::backward : span_kind::forward, s.step = step, s.microbatch = i;
    s.begin_ns = (std::int64_t{step} * 1'000'000 + i) * 1000, s.end_ns = s.begin_ns + 500;
    trace_recorder::global().record(s);
  }
}

} // namespace

TEST_CASE("a streamed trace keeps every span of a run that records many times what a ring holds") {
  streamed_run run{"many.json", 64};
  auto& [r, file, w, a] = run;
  for (int step = 0; step < 200; ++step) {
    record_step(a, 50, step); // the ring of 64 wraps again and again
    w->flush();
    r.count("loss", 3.0 - step * 0.01, step);
  }
  CHECK(!w->finish());
  CHECK(w->spans_written() == 200 * 50);
  CHECK(w->dropped() == 0);
  auto doc = nlohmann::json::parse(slurp(file)); // strict
  std::map<int, int> per_step;
  int losses = 0;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "X")
      ++per_step[e.at("args").at("step").get<int>()];
    losses += e.at("ph") == "C" && e.at("name") == "loss";
  }
  REQUIRE(per_step.size() == 200);
  for (const auto& [step, n] : per_step)
    CHECK_MESSAGE(n == 50, "step ", step);
  CHECK(losses == 200);
  CHECK(doc.at("otherData").at("dropped_spans") == 0);
}

TEST_CASE("a thread that records more than the default ring of 65,536 spans loses none to a writer that keeps up") {
  streamed_run run{"default.json", std::size_t{1} << 16}; // the default ring, what `troupe run` uses
  auto& [r, file, w, a] = run;
  std::thread t([&] { // one thread, 200,000 spans: three times its ring
    for (int i = 0; i < 200'000; ++i) {
      span s;
      s.actor = a, s.kind = span_kind::forward, s.step = i / 100, s.microbatch = i % 100;
      s.begin_ns = i * 1000, s.end_ns = s.begin_ns + 500;
      r.record(s);
      if (i % 20'000 == 19'999)
        w->flush(); // as the writer's thread does every 0.25 s
    }
  });
  t.join();
  CHECK(!w->finish());
  auto back = read_chrome_trace(file);
  REQUIRE(back);
  CHECK(back->spans.size() == 200'000);
  CHECK(back->dropped == 0);
  CHECK(w->cpu_ns() > 0); // what the writing cost, for deploy/bench/bench_trace_overhead.sh
}

TEST_CASE("the file is complete JSON after every flush, and a file cut mid-event reads up to its last whole "
          "event") {
  streamed_run run{"cut.json", 1024};
  auto& [r, file, w, a] = run;
  CHECK_NOTHROW(nlohmann::json::parse(slurp(file))); // valid before the first span
  std::string text;
  for (int step = 0; step < 3; ++step) {
    record_step(a, 10, step);
    w->flush();
    text = slurp(file);
    auto doc = nlohmann::json::parse(text); // what a crash right now would leave
    CHECK(doc.at("traceEvents").size() == 2 /* thread name, sort index */ + 1 /* process */ + 10u * (step + 1));
  }
  // A writer killed inside its next write: part of an event, or of the closing lines.
  auto last_event = text.rfind("\n{");
  REQUIRE(last_event != std::string::npos);
  for (auto cut : {text.size() - 5, last_event + 20, last_event + 1}) {
    auto cut_text = text.substr(0, cut);
    CHECK_THROWS(nlohmann::json::parse(cut_text));
    auto back = parse_chrome_trace(cut_text, "cut.json");
    REQUIRE_MESSAGE(back, "cut at ", cut);
    CHECK(back->cut_short);
    CHECK(back->spans.size() >= 29);
    CHECK(to_text(summarize(*back)).find("the file ends mid-event") != std::string::npos);
  }
  // New events half-written over the old closing lines, whose end is still there.
  auto overwritten = text.substr(0, text.rfind("\n]")) + ",\n{\"ph\":\"X\",\"na" + text.substr(text.size() - 20);
  auto back = parse_chrome_trace(overwritten, "over.json");
  REQUIRE(back);
  CHECK(back->spans.size() == 30);
  CHECK_FALSE(parse_chrome_trace("{\"traceEvents\":[\n{\"ph\":", "other.json")); // not ours: no guessing
  CHECK(!w->finish());
}

TEST_CASE("a trace file removed while the run goes on is written again at the end, whole") {
  streamed_run run{"removed.json", 1024, 64};
  auto& [r, file, w, a] = run;
  record_step(a, 10, 0);
  r.count("loss", 3.0, 0);
  w->flush();
  fs::remove(file);
  record_step(a, 10, 1);
  r.count("loss", 2.9, 1);
  CHECK(!w->finish());
  auto back = read_chrome_trace(file);
  REQUIRE(back);
  CHECK(back->spans.size() == 20);
  CHECK(std::count_if(back->counters.begin(), back->counters.end(),
                      [](const counter_sample& c) { return c.name == "tokens_per_s"; }) == 1);
  CHECK_FALSE(fs::exists(fs::path{file} += ".tmp"));
}

TEST_CASE("a trace file that cannot be created is an error naming it") {
  auto w = trace_writer::open("/nonexistent/folder/t.json", 0);
  REQUIRE_FALSE(w);
  CHECK(error_message(w.error()).find("/nonexistent/folder/t.json: cannot write trace") != std::string::npos);
}
