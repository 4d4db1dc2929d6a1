// A real `troupe run --trace` of the 4-stage tiny example: the JSON parsed
// strictly here, summarised by `troupe trace summarize`, and parsed by Chrome
// DevTools' trace engine (tests/trace_engine/check_trace.mjs).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace {

constexpr int steps = 3;
constexpr int microbatches = 8; // examples/tiny-gpt.yaml

std::string build_dir() {
  const char* b = std::getenv("TROUPE_BUILD_DIR");
  return b ? b : "build";
}

/// Runs `cmd`, returning its exit status and what it printed.
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen((cmd + " 2>&1").c_str(), "r")) {
    char buf[4096];
    while (auto n = std::fread(buf, 1, sizeof buf, p))
      out.append(buf, n);
    int rc = pclose(p);
    return {WIFEXITED(rc) ? WEXITSTATUS(rc) : 128, out};
  }
  return {127, "popen failed"};
}

/// The trace of one real run, made once for every test case here.
const std::string& trace_file() {
  static const std::string path = [] {
    auto file = build_dir() + "/trace_run_test.json";
    std::remove(file.c_str());
    auto [rc, out] = run(
      fmt::format("'{}/deploy/troupe' run examples/tiny-gpt.yaml --steps {} --trace '{}'", build_dir(), steps, file));
    INFO(out);
    REQUIRE(rc == 0);
    return file;
  }();
  return path;
}

nlohmann::json load(const std::string& file) {
  std::ifstream in(file);
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str()); // strict: throws on anything that is not JSON
}

} // namespace

TEST_CASE("a real run's trace is strict JSON with every span closed and its thread named before it") {
  auto doc = load(trace_file());
  REQUIRE(doc.is_object());
  const auto& events = doc.at("traceEvents");
  REQUIRE(events.is_array());
  std::map<std::pair<int, int>, std::string> thread_names;
  std::set<int> process_names;
  std::map<std::string, int> open_begins;
  std::map<std::uint64_t, int> flow_starts, flow_ends;
  std::map<std::string, int> counters;
  int complete = 0;
  for (const auto& ev : events) {
    auto ph = ev.at("ph").get<std::string>();
    auto key = std::pair{ev.at("pid").get<int>(), ev.at("tid").get<int>()};
    if (ph == "M") {
      if (ev.at("name") == "thread_name")
        thread_names[key] = ev.at("args").at("name").get<std::string>();
      if (ev.at("name") == "process_name")
        process_names.insert(key.first);
    } else if (ph == "X") {
      ++complete;
      CHECK_FALSE(ev.at("name").get<std::string>().empty());
      CHECK(ev.at("dur").get<double>() >= 0); // closed: a duration, never a dangling begin
      auto ts = ev.at("ts").get<double>();
      CHECK(ts >= 0);
      CHECK(thread_names.count(key) == 1); // the thread is named before its first span
      CHECK(process_names.count(key.first) == 1);
      // Not in time order across the file: it is written as the run goes, and a
      // span is written once it closes (Perfetto and DevTools sort on loading).
    } else if (ph == "B" || ph == "E") {
      open_begins[thread_names[key]] += ph == "B" ? 1 : -1;
    } else if (ph == "s") {
      ++flow_starts[ev.at("id").get<std::uint64_t>()];
    } else if (ph == "f") {
      ++flow_ends[ev.at("id").get<std::uint64_t>()];
    } else if (ph == "C") {
      ++counters[ev.at("name").get<std::string>()];
      CHECK(ev.at("args").at("value").is_number());
    }
  }
  for (const auto& [name, n] : open_begins)
    CHECK_MESSAGE(n == 0, name);
  CHECK(complete > 0);
  std::set<std::string> names;
  for (const auto& [k, n] : thread_names)
    names.insert(n);
  CHECK(names == std::set<std::string>{"loader", "s0", "s1", "s2", "s3"});
  // Every activation and gradient sent is received: each flow starts once and ends once.
  CHECK(flow_starts.size() == static_cast<std::size_t>(steps * microbatches * 2 * 3));
  for (const auto& [id, n] : flow_starts) {
    CHECK(n == 1);
    CHECK(flow_ends[id] == 1);
  }
  CHECK(flow_ends.size() == flow_starts.size());
  CHECK(counters["loss"] == steps);
  CHECK(counters["tokens_per_s"] == steps - 1);
}

TEST_CASE("troupe trace summarize prints busy, idle and bubble per actor and each stage's distinct action orders") {
  auto [rc, out] = run(fmt::format("'{}/deploy/troupe' trace summarize '{}'", build_dir(), trace_file()));
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("pipeline bubble fraction:") != std::string::npos);
  for (auto name : {"loader", "s0", "s1", "s2", "s3"})
    CHECK(out.find(fmt::format("\n{} ", name)) != std::string::npos);
  // 1F1B on the last stage alternates from the start: F0 B0 F1 B1 ...
  CHECK(out.find("3F0 3B0 3F1 3B1") != std::string::npos);
  CHECK(out.find("0F0 0F1 0F2 0F3") != std::string::npos);
  // Each distinct order once, with the steps that ran it: a line per order, not per step.
  for (auto name : {"s0", "s1", "s2", "s3"}) {
    auto prefix = fmt::format("\n  {:<12} step", name);
    int lines = 0;
    for (auto at = out.find(prefix); at != std::string::npos; at = out.find(prefix, at + 1))
      ++lines;
    CHECK_MESSAGE(lines >= 1, name);
    CHECK_MESSAGE(lines <= steps, name);
  }
  CHECK(out.find("\nstep 1\n") == std::string::npos); // no heading per step
  CHECK(out.find("mailbox: the most data messages waiting") != std::string::npos);
}

TEST_CASE("Chrome's trace engine finds every actor as a thread with its spans") {
  auto doc = load(trace_file());
  std::map<int, std::string> names;
  std::map<std::string, int> counts;
  std::set<int> pids;
  for (const auto& ev : doc.at("traceEvents")) {
    if (ev.at("ph") == "M" && ev.at("name") == "thread_name")
      names[ev.at("tid").get<int>()] = ev.at("args").at("name").get<std::string>();
    if (ev.at("ph") == "X")
      ++counts[names.at(ev.at("tid").get<int>())], pids.insert(ev.at("pid").get<int>());
  }
  nlohmann::json expected{{"processes", pids.size()}, {"threads", counts}};
  auto exp_file = build_dir() + "/trace_run_expected.json";
  std::ofstream(exp_file) << expected.dump();
  auto [rc, out] = run(fmt::format("node tests/trace_engine/check_trace.mjs '{}' '{}'", trace_file(), exp_file));
  INFO(out);
  CHECK(rc == 0);
  // Each stage ran steps × microbatches forward passes, and the engine saw each as one of its spans.
  for (auto stage : {"s0", "s1", "s2", "s3"})
    CHECK(counts[stage] >= steps * microbatches * 2);
}
