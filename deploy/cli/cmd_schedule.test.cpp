// `troupe schedule` end to end: the built program prints orders and bubble
// fractions, and refuses bad input with exit code 2.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <sys/wait.h>
#include <vector>

#include <unistd.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/troupe_command.hpp"

namespace {

using run_result = troupe::testing::command_result;
using troupe::testing::run_troupe;

bool has(const run_result& r, const std::string& part) {
  return r.has(part);
}

std::string build_dir() {
  const char* dir = std::getenv("TROUPE_BUILD_DIR");
  return dir ? dir : "build";
}

} // namespace

TEST_CASE("troupe schedule prints the 1F1B orders and the bubble fraction") {
  auto r = run_troupe("schedule --policy 1f1b --stages 4 --microbatches 8");
  CHECK(r.code == 0);
  CHECK(has(r, "rank 0: 0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7\n"));
  CHECK(has(r, "rank 3: 3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7\n"));
  CHECK(has(r, "bubble fraction: 0.2727"));
  CHECK(has(r, "peak in flight per rank: 4 3 2 1"));
}

TEST_CASE("troupe schedule takes stragglers, replays tables and compares with the replay") {
  auto slow = run_troupe("schedule --policy zb_h1 --stages 4 --microbatches 8 --slow 2:1.5 --jitter 0.3 --seed 3 "
                         "--latency 0.1 --slow-microbatch 5:4 --costs 1,2,1");
  CHECK(slow.code == 0);
  CHECK(has(slow, "rank 2: 2F0"));
  auto table = run_troupe("schedule --policy table --table examples/schedules/interleaved_4x8x2.csv --stages 4 "
                          "--microbatches 8 --virtual 2");
  CHECK(table.code == 0);
  CHECK(has(table, "bubble fraction: 0.1579"));
  auto cmp = run_troupe("schedule --policy zb_h1 --stages 4 --microbatches 8 --compare 10");
  CHECK(cmp.code == 0);
  CHECK(has(cmp, "one microbatch 4x slower"));
  CHECK(has(cmp, "microbatch costs 1-3x"));
}

TEST_CASE("troupe schedule refuses bad input with exit code 2 and a reason") {
  auto unknown = run_troupe("schedule --policy 1f1c --stages 4 --microbatches 8");
  CHECK(unknown.code == 2);
  CHECK(
    has(unknown,
        "unknown policy '1f1c' (known: 1f1b, dualpipev, gpipe, interleaved_1f1b, table, v_half, v_min, zb_h1, zbv"));
  CHECK(run_troupe("schedule --policy 1f1b --stages 4").code == 2);
  CHECK(run_troupe("schedule --policy 1f1b --stages 4 --microbatches 8 --slow 9:2").code == 2);
  CHECK(run_troupe("schedule --policy 1f1b --stages 4 --microbatches 8 --costs 1,2").code == 2);
  auto help = run_troupe("schedule --help");
  CHECK(help.code == 0);
  CHECK(has(help, "--slow-microbatch"));
}

TEST_CASE("troupe schedule --json prints the orders, makespan, bubble and bounds as one JSON object") {
  auto r = run_troupe("schedule --policy zb_h1 --stages 4 --microbatches 8 --json");
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["policy"] == "zb_h1");
  CHECK(j["shape"]["stages"] == 4);
  CHECK(j["shape"]["microbatches"] == 8);
  REQUIRE(j["orders"].size() == 4);
  CHECK(j["orders"]["0"][0] == "0F0");
  CHECK(j["orders"]["3"].size() == 24); // 8 x F, I, W
  CHECK(j["makespan"].get<double>() == doctest::Approx(27));
  CHECK(j["bubble"].get<double>() == doctest::Approx(1.0 / 9));
  CHECK(j["peak_in_flight"] == nlohmann::json{4, 3, 2, 1});
  CHECK(j["peak_deferred_weight"] == nlohmann::json{1, 2, 3, 4});
}

TEST_CASE("troupe schedule --json --compare lists one record per scenario with median makespans") {
  auto r = run_troupe("schedule --policy 1f1b --stages 4 --microbatches 8 --compare 5 --json");
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["seeds"] == 5);
  CHECK(j["shape"]["stages"] == 4);
  REQUIRE(j["records"].size() == 4);
  std::vector<std::string> scenarios;
  for (const auto& rec : j["records"]) {
    scenarios.push_back(rec["scenario"]);
    CHECK(rec["policy"] == "1f1b");
    CHECK(rec["emergent"].get<double>() >= 33); // no faster than the unperturbed step
    CHECK(rec["replayed"].get<double>() >= 33);
  }
  CHECK(scenarios == std::vector<std::string>{"jitter 30%", "one rank 1.5x slower", "one microbatch 4x slower",
                                              "microbatch costs 1-3x"});
}

TEST_CASE("troupe schedule --plugin loads the example plugin so its policy can be simulated and compared") {
  auto plugin = build_dir() + "/examples/libtroupe_greedy_policy.so";
  auto without = run_troupe("schedule --policy greedy_backward_first --stages 4 --microbatches 8");
  CHECK(without.code == 2);
  CHECK(has(without, "1f1b")); // unknown names fail with the list of valid ones
  auto r = run_troupe("schedule --plugin " + plugin +
                      " --policy greedy_backward_first --stages 4 --microbatches 8 "
                      "--slow 2:1.5");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(has(r, "schedule: greedy_backward_first, 4 stages"));
  CHECK(has(r, "rank 3: 3F0 3B0"));
  auto cmp = run_troupe("schedule --policy greedy_backward_first --plugin " + plugin +
                        " --stages 4 --microbatches 8 --compare 3 --json");
  INFO(cmp.out);
  CHECK(cmp.code == 0);
  CHECK(has(cmp, "\"policy\": \"greedy_backward_first\""));
  auto missing = run_troupe("schedule --plugin /nonexistent/libnothing.so --policy 1f1b --stages 4 --microbatches 8");
  CHECK(missing.code == 2);
  CHECK(has(missing, "troupe schedule: --plugin: "));
}

TEST_CASE("the example plugin builds out of the tree with the README's command and loads") {
  // The command examples/plugin/README.md gives, run from a folder outside the source tree.
  auto src = std::filesystem::current_path();
  // One folder per test process: two source trees tested at once must not share it.
  auto out = std::filesystem::temp_directory_path() / ("troupe_plugin_out_of_tree_" + std::to_string(::getpid()));
  std::filesystem::create_directories(out);
  auto cmd = "cd " + out.string() + " && TROUPE_SRC=" + src.string() +
             " && ${CXX:-c++} -std=c++20 -O2 -fPIC -shared -I\"$TROUPE_SRC\" "
             "\"$TROUPE_SRC/examples/plugin/greedy_policy.cpp\" -o libgreedy_policy.so";
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto r = run_troupe("schedule --plugin " + (out / "libgreedy_policy.so").string() +
                      " --policy greedy_backward_first --stages 2 --microbatches 4");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(has(r, "rank 1: 1F0 1B0"));
  std::filesystem::remove_all(out);
}

TEST_CASE("troupe schedule --policy all sets every policy's bubble, activations and traffic side by side") {
  auto text = run_troupe("schedule --policy all --stages 4 --microbatches 8");
  CHECK(text.code == 0);
  CHECK(has(text, "peak activations (microbatches)"));
  CHECK(has(text, "table              skipped: table: no schedule given"));
  auto r = run_troupe("schedule --policy all --stages 4 --microbatches 8 --activation-bytes 1000 --json");
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  std::map<std::string, nlohmann::json> by;
  for (const auto& row : j["policies"])
    by[row["policy"]] = row;
  REQUIRE(by.contains("zbv"));
  REQUIRE(by.contains("1f1b"));
  CHECK(by["zbv"]["chunks"] == 2);
  CHECK(by["zbv"]["bubble_rate"].get<double>() <= 0.05);
  CHECK(by["1f1b"]["bubble_rate"].get<double>() == doctest::Approx(3.0 / 8));
  CHECK(by["1f1b"]["peak_activations"] == nlohmann::json{4, 3, 2, 1});
  CHECK(by["zbv"]["peak_activations"] == nlohmann::json{4, 4, 4, 4});
  CHECK(by["v_min"]["peak_activations"] == nlohmann::json{2, 2, 2, 2});
  CHECK(by["zbv"]["pipeline_bytes"].get<double>() == 2 * by["1f1b"]["pipeline_bytes"].get<double>());
  CHECK(by["1f1b"]["pipeline_messages"] == 2 * 8 * 3);
  auto one = run_troupe("schedule --policy zbv --stages 4 --microbatches 8 --json"); // two chunks untold
  REQUIRE(one.code == 0);
  CHECK(nlohmann::json::parse(one.out)["bubble_rate"].get<double>() <= 0.05);
  auto bad = run_troupe("schedule --policy all --stages 4 --microbatches 8 --compare 3");
  CHECK(bad.code == 2);
}
