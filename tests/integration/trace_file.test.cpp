// The trace file of a real run: it keeps every span of a run longer than a
// thread's ring (the old default kept the last 65,536 spans a thread recorded),
// and a run killed half-way leaves a trace that reads.
#include <signal.h>

#include <filesystem>
#include <map>
#include <string>
#include <tuple>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "runtime/trace/trace_summary.hpp"
#include "tests/integration/troupe_process.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr int stages = 4;
constexpr int microbatches = 16;

/// (stage name, step, F or B) -> spans of that kind.
std::map<std::tuple<std::string, int, char>, int> passes(const trace_snapshot& t) {
  std::map<std::tuple<std::string, int, char>, int> n;
  for (const auto& s : t.spans)
    if (auto letter = action_letter(s.kind); letter && t.actors[s.actor].role == stage_role)
      ++n[{t.actors[s.actor].name, s.step, letter}];
  return n;
}

/// Every stage ran every microbatch of `step` forward and backward.
void check_whole_step(const std::map<std::tuple<std::string, int, char>, int>& n, int step) {
  for (int st = 0; st < stages; ++st)
    for (char letter : {'F', 'B'}) {
      auto it = n.find({fmt::format("s{}", st), step, letter});
      CHECK_MESSAGE((it != n.end() ? it->second : 0) == microbatches, "s", st, " step ", step, " ", letter);
    }
}

fs::path graph(const std::string& name, long steps) {
  auto dir = fs::temp_directory_path() / ("troupe_trace_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // A small model over many microbatches: many spans a second.
  std::ofstream{dir / "graph.yaml"} << "model: {layers: 4, d_model: 16, heads: 2, context: 8, vocab: 256}\n"
                                    << "data: {corpus: kjv, batch: " << microbatches << ", seed: 3}\n"
                                    << "train: {steps: " << steps << ", lr: 1.0e-3, warmup: 2, eval_batches: 1}\n"
                                    << "pipeline: {stages: " << stages << ", microbatches: " << microbatches
                                    << ", schedule: 1f1b}\n";
  return dir;
}

} // namespace

TEST_CASE("the trace of a run on one thread that records more than 65,536 spans holds every span it must") {
  constexpr int steps = 180; // about 76,000 spans
  auto dir = graph("long", steps);
  auto file = dir / "trace.json";
  // One worker thread records nearly every span: the old per-thread ring of
  // 65,536 kept only the last of them.
  troupe_process run{dir, {"run", (dir / "graph.yaml").string(), "--threads", "1", "--trace", file.string()}};
  REQUIRE(run.wait(600s) == 0); // about 100 s in the sanitizer build; 317 s once on a loaded machine
  auto out = slurp(run.out);
  INFO(out, slurp(run.err));
  auto t = read_chrome_trace(file);
  REQUIRE(t);
  CHECK_FALSE(t->cut_short);
  CHECK(t->dropped == 0);
  CHECK(t->spans.size() > 65'536);
  CHECK(out.find(fmt::format("trace: {} spans written to", t->spans.size())) != std::string::npos);
  auto n = passes(*t);
  CHECK(n.size() == static_cast<std::size_t>(stages * steps * 2));
  for (int step = 0; step < steps; ++step)
    check_whole_step(n, step);
  // Every message sent is received: each flow starts once and ends once.
  std::map<std::uint64_t, std::pair<int, int>> flows;
  for (const auto& s : t->spans)
    if (s.flow)
      ++(s.flow_end ? flows[s.flow].second : flows[s.flow].first);
  CHECK(flows.size() == static_cast<std::size_t>(steps * microbatches * (stages - 1) * 2));
  for (const auto& [id, ends] : flows)
    CHECK(ends == std::pair{1, 1});
  // The mailbox column counts stage-to-stage messages too: each receive counts
  // at least the message it takes (before, stages looked their peers' trace
  // ids up before the peers had registered, and counted none).
  int uncounted = 0;
  for (const auto& s : t->spans)
    uncounted += s.flow_end && s.mailbox == 0;
  CHECK(uncounted == 0);
  int losses = 0;
  for (const auto& c : t->counters)
    losses += c.name == "loss";
  CHECK(losses == steps);
  fs::remove_all(dir);
}

TEST_CASE("a run killed half-way leaves a trace of every step it finished, which troupe trace summarize reads") {
  auto dir = graph("killed", 1'000'000);
  auto file = dir / "trace.json";
  troupe_process run{dir, {"run", (dir / "graph.yaml").string(), "--trace", file.string()}};
  // Wait until the file on disk holds three whole steps, then kill without warning.
  auto until = std::chrono::steady_clock::now() + 120s;
  for (;;) {
    REQUIRE(std::chrono::steady_clock::now() < until);
    if (auto t = read_chrome_trace(file); t && passes(*t).count({"s0", 2, 'B'}))
      break;
    std::this_thread::sleep_for(100ms);
  }
  ::kill(run.pid, SIGKILL);
  CHECK(run.wait(10s) == 128 + SIGKILL);
  auto t = read_chrome_trace(file);
  REQUIRE(t);
  auto n = passes(*t);
  for (int step = 0; step < 2; ++step)
    check_whole_step(n, step);
  troupe_process summary{dir, {"trace", "summarize", file.string()}};
  CHECK(summary.wait(60s) == 0);
  auto text = slurp(summary.out);
  INFO(text, slurp(summary.err));
  CHECK(text.find("pipeline bubble fraction:") != std::string::npos);
  CHECK(text.find("  s0           steps 1-") != std::string::npos);
  fs::remove_all(dir);
}
