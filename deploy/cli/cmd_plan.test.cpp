// `troupe plan paths` end to end on small networks: one written inline, in CSV or
// as the preset plans the same; graphs without a plan are refused. (SkipPipe's
// geo20 setting: cmd_plan_geo20.slow.test.cpp, each plan about 2 s on an idle machine.)
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "deploy/cli/cmd_plan_testing.hpp"

using troupe::testing::plan_json;
using troupe::testing::run_troupe;

TEST_CASE("a network written inline, in a CSV file or as the preset gives the same plan") {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path() / fmt::format("troupe-plan-{}", ::getpid());
  fs::create_directories(dir);
  const std::string head = "model: {layers: 6, d_model: 64, heads: 2, context: 32}\ndata: {corpus: kjv, batch: 4}\n"
                           "train: {steps: 1}\npipeline: {stages: 3, microbatches: 2}\n"
                           "skip: {path_length: 2, memory: 3}\nsim: {device: a100_80gb}\n";
  std::ofstream{dir / "links.csv"} << "from,to,latency,bandwidth\nIowa,Japan,72.5ms,15GB/s\n"
                                      "Iowa,LA,23.4ms,66GB/s\nJapan,LA,50ms,29.8GB/s\n";
  std::ofstream{dir / "csv.yaml"} << head << "network: {csv: links.csv, nodes: [Iowa, Japan, LA, Iowa, LA]}\n";
  std::ofstream{dir / "inline.yaml"} << head << "network:\n  locations: [Iowa, Japan, LA]\n  links:\n"
                                     << "    - {between: [Japan, Iowa], latency: 72.5ms, bandwidth: 15GB/s}\n"
                                     << "    - {between: [Iowa, LA], latency: 23.4ms, bandwidth: 66GB/s}\n"
                                     << "    - {between: [LA, Japan], latency: 50ms, bandwidth: 29.8GB/s}\n"
                                     << "  nodes: [Iowa, Japan, LA, Iowa, LA]\n";
  auto csv = plan_json((dir / "csv.yaml").string());
  auto inline_ = plan_json((dir / "inline.yaml").string());
  CHECK(csv == inline_);
  CHECK(csv["locations"] == nlohmann::json{"Iowa", "Japan", "LA", "Iowa", "LA"});
  // The preset's measured links between the same regions differ: the plan's times with them.
  std::ofstream{dir / "preset.yaml"} << head << "network: {preset: geo12, nodes: [Iowa, Japan, LA, Iowa, LA]}\n";
  auto preset = plan_json((dir / "preset.yaml").string());
  CHECK(preset["time"]["planned"] != csv["time"]["planned"]);
  fs::remove_all(dir);
}

TEST_CASE("troupe plan paths refuses a graph without skip: and a missing file") {
  auto r = run_troupe("plan paths examples/tiny-gpt.yaml");
  CHECK(r.code == 2);
  CHECK(r.has("no `skip:` section"));
  CHECK(run_troupe("plan paths no-such.yaml").code == 2);
  CHECK(run_troupe("plan").code == 2);
}

TEST_CASE("a runnable plan lists each microbatch's route through the stage actors, back to its start's head") {
  auto j = plan_json("examples/skippipe-run.yaml");
  REQUIRE(j.contains("routes"));
  REQUIRE(j["routes"].size() == j["paths"].size());
  for (const auto& r : j["routes"]) {
    auto first = r.front().get<std::string>(), last = r.back().get<std::string>();
    CHECK(first.ends_with("s0.0"));
    CHECK(last == first.substr(0, first.size() - 1) + "1"); // the head chunk of the same stage 0
    CHECK(r.size() == j["paths"][0]["nodes"].size() + 1);
  }
  CHECK_FALSE(
    plan_json("examples/skippipe.yaml").contains("routes")); // 8 nodes, 4 stage actors: plannable, not runnable
}

TEST_CASE("plan paths --time-limit stops a long search with the best plans found by then, saying how it goes") {
  // geo20 over 40 nodes: searched to the end, about 170 s on an idle 2-core machine.
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_troupe("plan paths examples/skippipe-geo20.yaml --set network.nodes=40 --time-limit 3 --json");
  auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_MESSAGE(r.code == 0, r.out);
  CHECK(took < 90); // the limit, then the fixed work after it (DT-FM's chains, random draws)
  // Progress on stderr before the answer, one line every 2 s past the first 2 s.
  CHECK(r.has("troupe plan paths: SkipPipe's paths: phase 1 of 4 (memory and capacity): "));
  CHECK(r.has(" s so far"));
  auto at = r.out.find("\n{");
  REQUIRE(at != std::string::npos);
  auto j = nlohmann::json::parse(r.out.substr(at + 1));
  CHECK(j["cut_short"] == true);
  REQUIRE(j["paths"].size() > 0);
  for (const auto& p : j["paths"]) {
    CHECK(p["stages"].size() == j["paths"][0]["stages"].size());
    CHECK(p["stages"][0] == 0);
  }
  CHECK(j["time"]["planned"].get<double>() > 0);
  // A small plan finishes well inside a generous limit: not cut.
  CHECK(plan_json("examples/skippipe-run.yaml --time-limit 600")["cut_short"] == false);
  CHECK(run_troupe("plan paths examples/skippipe-run.yaml --time-limit 0").code == 2);
}
