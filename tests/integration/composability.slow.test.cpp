// The composability matrix (#25): every schedule with every mechanism, a few
// steps each, through the `troupe` command a user runs. Each pair either passes
// a named property that would fail if the mechanism were faked (a loss curve
// equal to a reference run that does the same arithmetic another way), or is
// refused by `troupe check` with an error that names its place. The README's
// matrix is this test's output (TROUPE_WRITE_MATRIX=1 rewrites it;
// TROUPE_MATRIX_ONLY=NAME runs only the rows of one mechanism).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/integration/skip_network.hpp"
#include "tests/integration/troupe_process.hpp"
#include "tests/troupe_command.hpp"

using namespace troupe::testing;
namespace fs = std::filesystem;

namespace {

constexpr int steps = 6;

const std::vector<std::string> schedules{"gpipe", "1f1b", "interleaved", "zb_h1"};

/// One graph: the schedule's pipeline, then the mechanism's sections.
struct graph {
  std::string schedule = "1f1b";
  int stages = 2;
  int batch = 2;
  std::string data;     ///< more `data:` keys (", documents: long_tail")
  std::string pipeline; ///< more `pipeline:` keys (", wire: bf16")
  std::string extra;    ///< more sections, one per line
};

/// GPipe's order over the interleaved placement (2 stages × 2 chunks), as a
/// `table` schedule: `troupe schedule` prints it, one rank per line.
const std::string& gpipe_interleaved_table(const fs::path& dir) {
  static std::string path;
  if (path.empty()) {
    auto r = run_troupe("schedule --policy gpipe --stages 2 --microbatches 4 --virtual 2");
    REQUIRE(r.code == 0);
    std::string csv, line;
    std::istringstream in(r.out);
    while (std::getline(in, line))
      if (line.starts_with("rank ")) {
        auto actions = line.substr(line.find(':') + 2);
        std::replace(actions.begin(), actions.end(), ' ', ',');
        csv += actions + "\n";
      }
    path = (dir / "gpipe_v2.csv").string();
    std::ofstream(path) << csv;
  }
  return path;
}

fs::path work_dir() {
  static fs::path dir = fs::temp_directory_path() / fmt::format("troupe_matrix_{}", ::getpid());
  return dir;
}

/// `interleaved` is interleaved 1F1B over 2 chunks per stage; `gpipe_interleaved`
/// is GPipe's order over the same placement, replayed as a table;
/// `interleaved_bounded` is interleaved 1F1B holding at most 2 microbatches' chunks.
std::string text_of(const graph& g) {
  std::string schedule = g.schedule;
  if (g.schedule == "interleaved")
    schedule = "interleaved_1f1b, virtual: 2";
  else if (g.schedule == "gpipe_interleaved")
    schedule = "table, virtual: 2, table: " + gpipe_interleaved_table(work_dir());
  else if (g.schedule == "interleaved_bounded") // another order over the same chunks: first chunks wait for room
    schedule = "interleaved_1f1b, virtual: 2, policy: {max_in_flight: 2}";
  return fmt::format(R"(model:    {{layers: 8, d_model: 32, heads: 2, context: 16, vocab: 256}}
data:     {{corpus: kjv, batch: {}, seed: 5{}}}
train:    {{steps: {}, lr: 2.0e-3, warmup: 2, eval_batches: 1}}
pipeline: {{stages: {}, microbatches: 4, schedule: {}{}}}
{})",
                     g.batch, g.data, steps, g.stages, schedule, g.pipeline, g.extra);
}

const std::string replicas2 = "data_parallel: {replicas: 2, bucket: 16KB}\n";

/// What a run of a graph gave: its per-step losses, or why it did not run.
struct outcome {
  bool refused = false;              ///< `troupe check` refused it
  std::string refusal;               ///< the first error, `file:line:col: path: message`
  bool positioned = false;           ///< that error names a line or an override
  std::optional<std::string> failed; ///< accepted, then the run failed: its output
  std::vector<double> losses;
};

class runner {
public:
  runner() : dir_(work_dir()) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~runner() { fs::remove_all(dir_); }

  /// `troupe check`, then `troupe VERB` of the graph (`run` or `launch`), with `args`; memoised by text.
  const outcome& run(const graph& g, const std::string& verb = "run", const std::string& args = "") {
    auto text = text_of(g);
    auto key = verb + "\n" + args + "\n" + text;
    if (auto it = memo_.find(key); it != memo_.end())
      return it->second;
    auto file = dir_ / fmt::format("g{}.yaml", memo_.size());
    std::ofstream(file) << text;
    outcome o;
    auto check = run_troupe("check --json " + file.string());
    if (check.code != 0) {
      auto j = nlohmann::json::parse(check.out.substr(check.out.find('{')), nullptr, false);
      REQUIRE_MESSAGE(!j.is_discarded(), check.out);
      REQUIRE_MESSAGE(!j["errors"].empty(), check.out);
      const auto& e = j["errors"][0];
      o.refused = true;
      o.positioned = e["line"].get<int>() > 0 || !e["origin"].get<std::string>().empty();
      o.refusal = fmt::format("{}: {}", e["path"].get<std::string>(), e["message"].get<std::string>());
      return memo_[key] = o;
    }
    auto summary = dir_ / fmt::format("s{}.json", memo_.size());
    auto r = run_troupe(verb + " " + file.string() + " --no-trace --summary-json " + summary.string() + " " + args);
    if (r.code != 0)
      o.failed = r.out.substr(r.out.size() > 2000 ? r.out.size() - 2000 : 0);
    else
      o.losses = summary_losses(summary);
    return memo_[key] = o;
  }
  fs::path dir() const { return dir_; }

private:
  fs::path dir_;
  std::map<std::string, outcome> memo_;
};

/// Largest relative difference between two curves (infinity when their lengths differ).
double worst(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.empty())
    return INFINITY;
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    w = std::max(w, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  return w;
}

/// A property's verdict for one cell.
struct verdict {
  bool ok = false;
  std::string detail;
};

/// One mechanism: how the schedule's graph gets it, and the property that checks it.
struct mechanism {
  std::string name;
  std::string property; ///< what the matrix says it checked
  std::function<graph(const std::string& schedule)> make;
  std::function<verdict(runner&, const std::string& schedule, const outcome& got)> check;
  std::string verb = "run";
};

/// The run equals `ref`'s curve to `tol`.
verdict equals(runner& r, const graph& ref, const outcome& got, double tol, const std::string& verb = "run") {
  const auto& want = r.run(ref, verb);
  if (want.refused || want.failed)
    return {false, "its reference did not run: " + (want.refused ? want.refusal : *want.failed)};
  auto w = worst(got.losses, want.losses);
  return {w <= tol, fmt::format("largest relative difference {:.2e} (limit {:.0e})", w, tol)};
}

/// The same mechanism on the same placement under another order gives the same
/// curve (a schedule only reorders the same arithmetic): gpipe against 1F1B,
/// interleaved against `interleaved_other` over its two chunks per stage (GPipe's
/// order replayed as a table, unless routes cross replicas, which no table can
/// replay), the others against gpipe.
std::function<verdict(runner&, const std::string&, const outcome&)>
schedule_invariant(std::function<graph(const std::string&)> make, std::string interleaved_other = "gpipe_interleaved") {
  return [make, interleaved_other](runner& r, const std::string& s, const outcome& got) {
    auto other = s == "gpipe" ? "1f1b" : s == "interleaved" ? interleaved_other : "gpipe";
    return equals(r, make(other), got, 1e-5);
  };
}

graph with(std::string schedule, std::string extra, std::string data = "", int stages = 2) {
  graph g;
  g.schedule = std::move(schedule), g.extra = std::move(extra), g.data = std::move(data), g.stages = stages;
  return g;
}

std::vector<mechanism> mechanisms() {
  std::vector<mechanism> out;
  // Data parallelism: R replicas of batch b equal one replica of batch R·b.
  for (int zero : {0, 1, 2}) {
    auto dp = fmt::format("data_parallel: {{replicas: 2, bucket: 16KB, zero: {}}}\n", zero);
    out.push_back({fmt::format("data_parallel zero {}", zero), "= 1 replica of 2× batch",
                   [dp](const std::string& s) { return with(s, dp); },
                   [](runner& r, const std::string& s, const outcome& got) {
                     auto ref = with(s, "");
                     ref.batch = 4;
                     return equals(r, ref, got, 1e-5);
                   }});
  }
  out.push_back(
    {"least_loaded", "= the replicas' own chains",
     [](const std::string& s) { return with(s, "data_parallel: {replicas: 2, bucket: 16KB, route: least_loaded}\n"); },
     [](runner& r, const std::string& s, const outcome& got) { return equals(r, with(s, replicas2), got, 1e-5); }});
  for (std::string method : {"diloco", "streaming_diloco", "noloco", "desloc", "sparseloco"}) {
    std::string lu = method == "streaming_diloco" ? "{algorithm: streaming_diloco, sync_every: 2, fragments: 2}"
                     : method == "desloc" ? "{algorithm: desloc, periods: {params: 2, momentum: 2, variance: 4}}"
                                          : fmt::format("{{algorithm: {}, sync_every: 2}}", method);
    auto make = [lu](const std::string& s) { return with(s, replicas2 + "local_update: " + lu + "\n"); };
    if (method != "noloco") {
      out.push_back({method, "schedule-invariant", make, schedule_invariant(make)});
      continue;
    }
    // NoLoCo's random routes cross replicas at every boundary (interleaved: on
    // the first chunk's way, the later chunks retracing it). Its curve must also
    // leave the one whose microbatches stay on their replica's own chain, or
    // the routes were not taken.
    auto invariant = schedule_invariant(make, "interleaved_bounded");
    out.push_back({method, "schedule-invariant; ≠ route: chain", make,
                   [make, invariant](runner& r, const std::string& s, const outcome& got) {
                     auto v = invariant(r, s, got);
                     auto chain = make(s);
                     chain.extra.replace(chain.extra.find("sync_every: 2}"), 14, "sync_every: 2, route: chain}");
                     const auto& own = r.run(chain);
                     if (own.refused || own.failed)
                       return verdict{false, "its route: chain twin did not run"};
                     auto apart = worst(got.losses, own.losses);
                     return verdict{v.ok && apart > 1e-4,
                                    fmt::format("{}; against route: chain {:.2e} (must exceed 1e-4)", v.detail, apart)};
                   }});
  }
  auto skip = [](const std::string& s, int length) { // full paths (the `full` planner) keep every stage in order
    return with(s,
                fmt::format("data_parallel: {{replicas: 2}}\n{}skip: {{path_length: {}, memory: {}{}}}\n",
                            skip_network8, length, length < 4 ? 3 : 8, length < 4 ? "" : ", planner: full"),
                "", 4);
  };
  // Skipping changes the arithmetic, so no run without it equals it; its machinery
  // (planned routes across replicas, the head apart on stage 0) is checked by
  // the same graph with full paths, which must equal data parallelism without
  // skip. Another schedule runs the same paths and microbatches: gpipe's curve.
  out.push_back(
    {"skip paths", "its full-path twin = DDP; = gpipe's paths", [skip](const std::string& s) { return skip(s, 3); },
     [skip](runner& r, const std::string& s, const outcome& got) {
       const auto& full = r.run(skip(s, 4));
       if (full.refused || full.failed)
         return verdict{false, "the full-path twin did not run: " + (full.refused ? full.refusal : *full.failed)};
       auto twin = equals(r, with(s, "data_parallel: {replicas: 2}\n", "", 4), full, 1e-5);
       if (s == "gpipe" || !twin.ok)
         return twin;
       auto same = equals(r, skip("gpipe", 3), got, 1e-6);
       return verdict{same.ok, "twin: " + twin.detail + "; against gpipe: " + same.detail};
     }});
  out.push_back({"attention servers", "= colocated attention",
                 [](const std::string& s) {
                   return with(s, replicas2 + "attention: {servers: in_place, nano_batches: 2}\n",
                               ", documents: long_tail");
                 },
                 [](runner& r, const std::string& s, const outcome& got) {
                   return equals(r, with(s, replicas2, ", documents: long_tail"), got, 1e-5);
                 }});
  auto docs = [](const std::string& s) { return with(s, "", ", documents: long_tail"); };
  out.push_back({"documents", "schedule-invariant", docs, schedule_invariant(docs)});
  out.push_back({"launch across processes", "= one process",
                 [](const std::string& s) { return with(s, "cluster: {launcher: local, nodes: 2}\n"); },
                 [](runner& r, const std::string& s, const outcome& got) { return equals(r, with(s, ""), got, 1e-5); },
                 "launch"});
  out.push_back(
    {"checkpoint/resume", "resumed = uninterrupted", [](const std::string& s) { return with(s, ""); },
     [](runner& r, const std::string& s, const outcome& got) -> verdict {
       auto ck = r.dir() / ("ck_" + s);
       auto g = with(s, fmt::format("checkpoint: {{dir: {}, every: 3}}\n", ck.string()));
       const auto& full = r.run(g);
       if (full.refused || full.failed)
         return {false, "the checkpointed run did not run: " + (full.refused ? full.refusal : *full.failed)};
       const auto& resumed = r.run(g, "run", "--resume " + (ck / "step-000003").string());
       if (resumed.refused || resumed.failed)
         return {false, "the resumed run failed: " + (resumed.refused ? resumed.refusal : *resumed.failed)};
       std::vector<double> tail(full.losses.begin() + std::min<std::size_t>(3, full.losses.size()), full.losses.end());
       auto w = worst(resumed.losses, tail);
       auto v = worst(full.losses, got.losses); // checkpointing changes nothing
       return {w <= 1e-6 && v <= 1e-6,
               fmt::format("resumed {:.2e}, with checkpoints against without {:.2e} (limit 1e-6)", w, v)};
     }});
  out.push_back(
    {"wire bf16", "within 1% of f32",
     [](const std::string& s) {
       auto g = with(s, "");
       g.pipeline = ", wire: bf16";
       return g;
     },
     [](runner& r, const std::string& s, const outcome& got) { return equals(r, with(s, ""), got, 1e-2); }});
  return out;
}

/// The README's copy of the matrix sits between these lines.
const std::string begin_marker =
  "<!-- composability matrix: written by tests/integration/composability.slow.test.cpp -->";
const std::string end_marker = "<!-- end of composability matrix -->";

} // namespace

TEST_CASE("every schedule with every mechanism passes its property or is refused at check with its place") {
  runner r;
  std::map<std::string, int> reasons; // refusal -> its footnote number
  std::vector<std::string> rows;
  int passed = 0, refused = 0;
  // TROUPE_MATRIX_ONLY=skip runs only the rows whose mechanism names it (while
  // working on one); the README is then neither compared nor written.
  const char* only = std::getenv("TROUPE_MATRIX_ONLY");
  for (const auto& m : mechanisms()) {
    if (only && m.name.find(only) == std::string::npos)
      continue;
    std::string row = "| " + m.name + " |";
    for (const auto& s : schedules) {
      CAPTURE(m.name);
      CAPTURE(s);
      const auto& got = r.run(m.make(s), m.verb);
      if (got.refused) {
        CHECK_MESSAGE(got.positioned, got.refusal); // a refusal says where
        auto [it, fresh] = reasons.emplace(got.refusal, static_cast<int>(reasons.size()) + 1);
        row += fmt::format(" refused [{}] |", it->second);
        ++refused;
        continue;
      }
      REQUIRE_MESSAGE(!got.failed, "accepted by troupe check, then failed:\n", got.failed.value_or(""));
      auto v = m.check(r, s, got);
      CHECK_MESSAGE(v.ok, m.property, ": ", v.detail);
      MESSAGE(m.name, " × ", s, ": ", m.property, ": ", v.detail);
      row += v.ok ? " ✓ |" : " ✗ |";
      passed += v.ok;
    }
    rows.push_back(row + " " + m.property + " |");
  }
  std::string table =
    "| mechanism | gpipe | 1f1b | interleaved | zb_h1 | property checked |\n|---|---|---|---|---|---|\n";
  for (const auto& row : rows)
    table += row + "\n";
  std::vector<std::pair<int, std::string>> notes;
  for (const auto& [why, n] : reasons)
    notes.emplace_back(n, why);
  std::sort(notes.begin(), notes.end());
  table += fmt::format("\n{} pairs pass their property; {} are refused at `troupe check`:\n\n", passed, refused);
  for (const auto& [n, why] : notes)
    table += fmt::format("{}. {}\n", n, why);
  MESSAGE("\n", table);

  if (only)
    return;
  // The README shows exactly this matrix.
  fs::path readme = "README.md"; // tests run in the source folder
  auto text = slurp(readme);
  auto a = text.find(begin_marker), b = text.find(end_marker);
  REQUIRE_MESSAGE((a != std::string::npos && b != std::string::npos && a < b), "README.md has no matrix markers");
  auto body = "\n" + table + "\n";
  auto current = text.substr(a + begin_marker.size(), b - a - begin_marker.size());
  if (current != body && std::getenv("TROUPE_WRITE_MATRIX")) {
    text.replace(a + begin_marker.size(), b - a - begin_marker.size(), body);
    std::ofstream(readme) << text;
    current = body;
  }
  CHECK_MESSAGE(current == body, "README.md's matrix is not this run's; TROUPE_WRITE_MATRIX=1 rewrites it");
}
