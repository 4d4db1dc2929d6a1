// `troupe plan attention` end to end: the example balanced within the
// tolerance with every pair and query accounted for (pairs recomputed here from
// the lengths, not read from the planner), replicas folded onto fewer servers,
// the text table, and bad command lines refused with the flag at fault.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "deploy/cli/cmd_plan_testing.hpp"

using troupe::testing::plan_attention_json;
using troupe::testing::run_troupe;

namespace {

/// Causal pairs of queries [kv − q, kv) over keys [0, kv): kv + (kv − 1) + … + (kv − q + 1).
std::int64_t pairs(std::int64_t q, std::int64_t kv) {
  std::int64_t sum = 0;
  for (std::int64_t i = kv - q; i < kv; ++i)
    sum += i + 1;
  return sum;
}

std::int64_t whole(std::int64_t length) {
  return length * (length + 1) / 2;
}

std::int64_t sum(const std::vector<std::int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::int64_t{0});
}

double max_over_avg(const std::vector<std::int64_t>& v) {
  return double(*std::max_element(v.begin(), v.end())) * double(v.size()) / double(sum(v));
}

} // namespace

TEST_CASE("the issue's example: each server's whole documents before, the same pairs after within 1.1 of the "
          "average, and every moved query accounted for") {
  // Replica 0 draws 16384, replica 1 two of 8192, replica 2 four of 4096; doc i is the i-th length.
  const std::vector<std::int64_t> length{16384, 8192, 8192, 4096, 4096, 4096, 4096};
  const std::vector<int> home{0, 1, 1, 2, 2, 2, 2};
  auto j = plan_attention_json("--docs 16384/8192,8192/4096,4096,4096,4096 --servers 3");
  auto before = j["before"].get<std::vector<std::int64_t>>();
  auto after = j["after"].get<std::vector<std::int64_t>>();
  CHECK(before == std::vector<std::int64_t>{whole(16384), 2 * whole(8192), 4 * whole(4096)});
  REQUIRE(after.size() == 3);
  CHECK(sum(after) == sum(before));
  CHECK(j["imbalance_before"].get<double>() == doctest::Approx(max_over_avg(before)));
  CHECK(j["imbalance_after"].get<double>() == doctest::Approx(max_over_avg(after)));
  CHECK(max_over_avg(before) > 1.7);
  // Reachable here: the longest document's last query costs 16384 pairs, far below
  // 0.1 × the average (7.8 M), so cuts can land within the tolerance.
  CHECK(max_over_avg(after) <= 1.1);
  CHECK(double(*std::min_element(after.begin(), after.end())) >= 0.9 * double(sum(after)) / 3);

  // Replaying the moves on the loads before gives the loads after.
  REQUIRE_FALSE(j["moved"].empty());
  auto load = before;
  for (const auto& m : j["moved"]) {
    auto doc = m["doc"].get<std::size_t>();
    auto q = m["q"].get<std::int64_t>(), kv = m["kv"].get<std::int64_t>();
    REQUIRE(doc < length.size());
    CHECK(q >= 1);
    CHECK(q <= kv);
    CHECK(kv <= length[doc]);
    CHECK(m["from"] != m["to"]);
    load[m["from"].get<std::size_t>()] -= pairs(q, kv);
    load[m["to"].get<std::size_t>()] += pairs(q, kv);
  }
  CHECK(load == after);

  // Each document's shards partition its queries, each server's shards sum to its
  // pairs after, and a shard away from home lies within a move to its server.
  std::vector<std::int64_t> held(3, 0);
  for (std::size_t doc = 0; doc < length.size(); ++doc) {
    CAPTURE(doc);
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
    for (const auto& s : j["shards"]) {
      if (s["doc"].get<std::size_t>() != doc)
        continue;
      auto q = s["q"].get<std::int64_t>(), kv = s["kv"].get<std::int64_t>();
      auto server = s["server"].get<int>();
      ranges.emplace_back(kv - q, kv);
      held[std::size_t(server)] += pairs(q, kv);
      if (server == home[doc])
        continue;
      bool moved_there = std::any_of(j["moved"].begin(), j["moved"].end(), [&](const auto& m) {
        return m["doc"].template get<std::size_t>() == doc && m["to"].template get<int>() == server &&
               m["kv"].template get<std::int64_t>() - m["q"].template get<std::int64_t>() <= kv - q &&
               kv <= m["kv"].template get<std::int64_t>();
      });
      CHECK(moved_there);
    }
    std::sort(ranges.begin(), ranges.end());
    std::int64_t at = 0;
    for (auto [b, e] : ranges) {
      CHECK(b == at);
      at = e;
    }
    CHECK(at == length[doc]);
  }
  CHECK(held == after);
}

TEST_CASE("--servers defaults to one per replica; replica r starts on server r mod --servers") {
  CHECK(plan_attention_json("--docs 16/8/4")["before"] == nlohmann::json{whole(16), whole(8), whole(4)});
  CHECK(plan_attention_json("--docs 16/8/4 --servers 2")["before"] == nlohmann::json{whole(16) + whole(4), whole(8)});
  auto four = plan_attention_json("--docs 16/8/4 --servers 4");
  CHECK(four["before"] == nlohmann::json{whole(16), whole(8), whole(4), 0});
  CHECK(four["after"][3].get<std::int64_t>() > 0); // the empty server receives work
}

TEST_CASE("troupe plan attention prints the table of pairs, max/avg and the moves; balanced input moves nothing") {
  auto r = run_troupe("plan attention --docs 16384/8192,8192/4096,4096,4096,4096 --servers 3");
  REQUIRE_MESSAGE(r.code == 0, r.out);
  CHECK(r.has("server     pairs before      pairs after"));
  CHECK(r.has(fmt::format("      0 {:>16}", whole(16384))));
  CHECK(r.has(fmt::format("      1 {:>16}", 2 * whole(8192))));
  CHECK(r.has(fmt::format("      2 {:>16}", 4 * whole(4096))));
  auto total = whole(16384) + 2 * whole(8192) + 4 * whole(4096);
  CHECK(r.has(fmt::format("  total {:>16} {:>16}", total, total)));
  CHECK(r.has(fmt::format("max/avg {:>16.3f}", 3.0 * double(whole(16384)) / double(total))));
  CHECK(r.has("doc replica:i"));
  CHECK(r.has("doc 0 (0:0, length 16384): [0, "));
  auto even = run_troupe("plan attention --docs 1000/1000/1000");
  CHECK(even.code == 0);
  CHECK(even.has("no moves"));
  CHECK(plan_attention_json("--docs 1000/1000/1000")["moved"].empty());
}

TEST_CASE("troupe plan attention refuses bad lengths, servers and tolerances, naming the flag") {
  auto bad = [](const std::string& args, const std::string& says) {
    auto r = run_troupe("plan attention " + args);
    CAPTURE(args);
    CHECK(r.code == 2);
    CHECK_MESSAGE(r.has(says), r.out);
  };
  bad("--docs 16/8,x", "troupe plan attention: --docs: 'x' at character 6 of '16/8,x' is not a document length");
  bad("--docs 16//8", "--docs: '' at character 4");
  bad("--docs 16/-8", "--docs: '-8' at character 4");
  bad("--docs 2000000000/2000000000", "--docs: the documents total more than 2147483648 tokens");
  bad("--servers 3", "--docs is required");
  bad("--docs 16/8 --servers 0", "--servers: expected an integer from 1 to 4096, got '0'");
  bad("--docs 16/8 --tolerance 0", "--tolerance: expected a number in (0, 1), got '0'");
  bad("--docs 16/8 --tolerance 1.5", "--tolerance: expected a number in (0, 1), got '1.5'");
  std::string many = "1";
  for (int i = 1; i < 8193; ++i)
    many += ",1";
  bad("--docs " + many, "--docs: 8193 documents; at most 8192");
}
