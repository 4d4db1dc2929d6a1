// `troupe plan paths` end to end: the geo20 example's plan against the full
// pipeline, random skipping and the plan blind to collisions; every printed path
// keeps the rules; a network written inline, in CSV or as the preset plans the same.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/troupe_command.hpp"

using troupe::testing::run_troupe;

namespace {

nlohmann::json plan_json(const std::string& args) {
  auto r = run_troupe("plan paths " + args + " --json");
  REQUIRE_MESSAGE(r.code == 0, r.out);
  return nlohmann::json::parse(r.out);
}

const std::string geo20 = "examples/skippipe-geo20.yaml";

/// The path invariants and memory, checked on the printed plan.
void check_paths(const nlohmann::json& j, int stages, int length, int memory) {
  auto placement = j["placement"].get<std::vector<std::vector<int>>>();
  REQUIRE(static_cast<int>(placement.size()) == stages);
  std::map<int, int> stage_of, held;
  for (int s = 0; s < stages; ++s)
    for (int n : placement[s]) {
      CHECK(stage_of.count(n) == 0);
      stage_of[n] = s;
    }
  for (const auto& p : j["paths"]) {
    auto nodes = p["nodes"].get<std::vector<int>>();
    auto st = p["stages"].get<std::vector<int>>();
    REQUIRE(static_cast<int>(nodes.size()) == length);
    CHECK(st.front() == 0);
    CHECK(std::set<int>(st.begin(), st.end()).size() == st.size());
    int frontier = 0, swaps = 0;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      CHECK(stage_of.at(nodes[i]) == st[i]);
      if (i > 0)
        ++held[nodes[i]];
      if (st[i] > frontier) {
        CHECK(st[i] - frontier <= 4);
        frontier = st[i];
      } else if (i > 0) {
        CHECK(frontier - st[i] == 1);
        ++swaps;
      }
    }
    CHECK(swaps <= 2);
  }
  for (auto [n, k] : held)
    CHECK(k <= memory);
}

} // namespace

TEST_CASE(
    "on 20 geo-distributed nodes the plan beats the full pipeline, random skipping and collision blindness") {
  auto j = plan_json(geo20);
  const auto& t = j["time"];
  double planned = t["planned"], full = t["full"], fixed = t["full_fixed_chains"], random = t["random"],
         blind = t["no_collision_awareness"];
  MESSAGE(
      fmt::format("planned {:.2f} s, full {:.2f} s (fixed chains {:.2f} s), random {:.2f} s, blind {:.2f} s",
                  planned, full, fixed, random, blind));
  CHECK(planned < full);
  CHECK(planned < fixed);
  CHECK(planned < random);
  CHECK(planned < blind);
  CHECK(j["paths"].size() == 15);
  check_paths(j, 6, 4, 4);
  // The rules hold with other path lengths and a tighter memory too.
  check_paths(plan_json(geo20 + " --set skip.path_length=3 --set skip.memory=3"), 6, 3, 3);
}

TEST_CASE("a placement the graph gives is the one planned on, and planner: full visits every stage") {
  auto j = plan_json(geo20 +
                     " --set 'skip.placement=[[0,1,2,3,4],[5,6,7],[8,9,10],[11,12,13],[14,15,16],[17,18,19]]'"
                     " --set skip.planner=full");
  CHECK(j["placement"][1] == nlohmann::json{5, 6, 7});
  for (const auto& p : j["paths"])
    CHECK(p["stages"] == nlohmann::json{0, 1, 2, 3, 4, 5});
  CHECK(j["time"]["planned"] == j["time"]["full"]);
}

TEST_CASE("a network written inline, in a CSV file or as the preset gives the same plan") {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path() / fmt::format("troupe-plan-{}", ::getpid());
  fs::create_directories(dir);
  const std::string head =
      "model: {layers: 6, d_model: 64, heads: 2, context: 32}\ndata: {corpus: kjv, batch: 4}\n"
      "train: {steps: 1}\npipeline: {stages: 3, microbatches: 2}\n"
      "skip: {path_length: 2, memory: 3}\nsim: {device: a100_80gb}\n";
  std::ofstream{dir / "links.csv"} << "from,to,latency,bandwidth\nIowa,Japan,72.5ms,15GB/s\n"
                                      "Iowa,LA,23.4ms,66GB/s\nJapan,LA,50ms,29.8GB/s\n";
  std::ofstream{dir / "csv.yaml"} << head
                                  << "network: {csv: links.csv, nodes: [Iowa, Japan, LA, Iowa, LA]}\n";
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
  std::ofstream{dir / "preset.yaml"} << head
                                     << "network: {preset: geo12, nodes: [Iowa, Japan, LA, Iowa, LA]}\n";
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
