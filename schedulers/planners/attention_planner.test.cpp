// The core-attention planner: conservation of pairs and queries, the tolerance
// reached whenever the pieces are fine enough, and cheap moves preferred.
#include "schedulers/planners/attention_planner.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

#include <doctest/doctest.h>

using namespace troupe::sched;

namespace {

/// Long-tailed lengths (mostly short, some long) spread over `replicas` homes,
/// one replica drawing the longest ones.
std::vector<attention_document> random_mix(std::mt19937& rng, int replicas) {
  std::vector<attention_document> docs;
  int count = 1 + int(rng() % 40);
  std::uniform_real_distribution<double> u(1e-3, 1.0);
  for (int i = 0; i < count; ++i) {
    auto len = static_cast<std::int64_t>(std::min(4096.0, 16.0 / std::pow(u(rng), 1 / 1.2)));
    int home = len > 256 ? 0 : int(rng() % unsigned(replicas));
    docs.push_back({len, home});
  }
  return docs;
}

/// Checks that `plan` conserves everything of `docs`: each document's shards are
/// queries [kv − q, kv) that partition [0, length), every server's load is the sum
/// of its shards, and the total is unchanged.
void check_conserved(const std::vector<attention_document>& docs, const attention_plan& plan) {
  std::int64_t total = 0;
  for (const auto& d : docs)
    total += causal_pairs(d.length, d.length);
  CHECK(std::accumulate(plan.before.begin(), plan.before.end(), std::int64_t{0}) == total);
  CHECK(std::accumulate(plan.after.begin(), plan.after.end(), std::int64_t{0}) == total);
  std::vector<std::int64_t> load(plan.after.size(), 0);
  for (std::size_t doc = 0; doc < docs.size(); ++doc) {
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
    for (const auto& s : plan.shards)
      if (s.doc == int(doc)) {
        CHECK(s.q >= 1);
        CHECK(s.q <= s.kv);
        CHECK(s.kv <= docs[doc].length);
        ranges.emplace_back(s.kv - s.q, s.kv);
      }
    std::sort(ranges.begin(), ranges.end());
    std::int64_t at = 0;
    for (auto [b, e] : ranges) {
      CHECK(b == at);
      at = e;
    }
    CHECK(at == docs[doc].length);
  }
  for (const auto& s : plan.shards)
    load[std::size_t(s.server)] += causal_pairs(s.q, s.kv);
  CHECK(load == plan.after);
}

} // namespace

TEST_CASE("a shard's causal pairs are q·kv − q(q−1)/2, and a head and tail split adds up") {
  CHECK(causal_pairs(1, 1) == 1);
  CHECK(causal_pairs(4, 4) == 10); // 1 + 2 + 3 + 4
  CHECK(causal_pairs(2, 5) == 9);  // queries 3 and 4: 4 + 5 keys
  for (std::int64_t len : {7, 100, 4096})
    for (std::int64_t h = 1; h < len; h += len / 7 + 1)
      CHECK(causal_pairs(h, h) + causal_pairs(len - h, len) == causal_pairs(len, len));
}

TEST_CASE("plans conserve pairs and each document's queries over random long-tail mixes") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    int replicas = 1 + int(rng() % 4), servers = replicas + int(rng() % 3);
    auto docs = random_mix(rng, replicas);
    double tol = std::uniform_real_distribution<double>(0.0, 0.3)(rng);
    CAPTURE(trial);
    auto plan = plan_attention(docs, {servers, tol});
    check_conserved(docs, plan);
    CHECK(plan.imbalance_after() <= plan.imbalance_before() + 1e-12);
  }
}

TEST_CASE("max/avg ends within 1 + tolerance whenever shards can be cut fine enough") {
  // A cut moves whole queries; query i of a document costs i + 1 pairs, so the
  // planner can always make progress when the longest document costs less per
  // query than the least a server below the average can take (tolerance × avg / (servers − 1)).
  std::mt19937 rng(12);
  int eligible = 0;
  for (int trial = 0; trial < 400; ++trial) {
    int replicas = 1 + int(rng() % 4), servers = std::max(2, replicas + int(rng() % 3));
    auto docs = random_mix(rng, replicas);
    double tol = std::uniform_real_distribution<double>(0.02, 0.3)(rng);
    std::int64_t total = 0, longest = 0;
    for (const auto& d : docs)
      total += causal_pairs(d.length, d.length), longest = std::max(longest, d.length);
    double avg = double(total) / servers;
    if (double(longest) * 2 > tol * avg / (servers - 1))
      continue;
    ++eligible;
    CAPTURE(trial);
    auto plan = plan_attention(docs, {servers, tol});
    check_conserved(docs, plan);
    INFO("before " << plan.imbalance_before() << " after " << plan.imbalance_after() << " tolerance " << tol);
    CHECK(plan.imbalance_after() <= 1 + tol);
    CHECK(double(*std::min_element(plan.after.begin(), plan.after.end())) >= (1 - tol) * avg);
  }
  CHECK(eligible >= 50);
}

TEST_CASE("one replica with the long documents is balanced by cutting them, and balanced input is left alone") {
  // The example: replica 0 draws 16384, replica 1 two of 8192, replica 2 four of 4096.
  auto docs = parse_replica_documents("16384/8192,8192/4096,4096,4096,4096");
  REQUIRE(docs.size() == 7);
  CHECK(docs[0].home == 0);
  CHECK(docs[2].home == 1);
  CHECK(docs[6].home == 2);
  auto plan = plan_attention(docs, {3, 0.1});
  CHECK(plan.imbalance_before() > 1.5);
  CHECK(plan.imbalance_after() <= 1.1);
  check_conserved(docs, plan);
  // Already balanced: nothing moves.
  auto even = parse_replica_documents("1000/1000/1000");
  auto none = plan_attention(even, {3, 0.1});
  CHECK(none.moves.empty());
  CHECK(none.after == none.before);
}

TEST_CASE("the planner moves the work that sends the fewest bytes per pair") {
  // Server 0 holds one long document and many short ones with the same pairs in all.
  // A tail of the long one carries ~L pairs per query sent; a short document ~l/4
  // per token sent; so the cheap moves come from the long document.
  std::vector<attention_document> docs{{2048, 0}};
  std::int64_t short_pairs = 0;
  while (short_pairs < causal_pairs(2048, 2048))
    docs.push_back({64, 0}), short_pairs += causal_pairs(64, 64);
  docs.push_back({16, 1});
  auto plan = plan_attention(docs, {2, 0.05});
  REQUIRE_FALSE(plan.moves.empty());
  CHECK(plan.moves.front().doc == 0);
  CHECK(plan.imbalance_after() <= 1.05);
  // The same pairs moved as whole short documents would send far more.
  double moved = double(plan.before[0] - plan.after[0]);
  double short_bytes = moved / double(causal_pairs(64, 64)) * (2 * 64 + 2 * 64);
  CHECK(plan.bytes < short_bytes / 4);
  // Keys already sent to a server are not sent again: a second shard of the same
  // document to the same server costs only its queries.
  for (std::size_t i = 1; i < plan.moves.size(); ++i)
    if (plan.moves[i].doc == 0 && plan.moves[i].kv <= plan.moves[0].kv && plan.moves[i].to == plan.moves[0].to)
      CHECK(plan.moves[i].bytes == doctest::Approx(2.0 * double(plan.moves[i].q)));
}

TEST_CASE("bad plans and document lists are refused with what is wrong") {
  CHECK_THROWS_WITH_AS(plan_attention({{10, 2}}, {2, 0.1}), doctest::Contains("replica 2"), std::invalid_argument);
  CHECK_THROWS_AS(plan_attention({{0, 0}}, {1, 0.1}), std::invalid_argument);
  CHECK_THROWS_AS(plan_attention({{5, 0}}, {0, 0.1}), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_replica_documents("16/8,x"), doctest::Contains("'x' at character 6"),
                       std::invalid_argument);
  CHECK_THROWS_AS(parse_replica_documents("16//8"), std::invalid_argument);
  CHECK_THROWS_AS(parse_replica_documents(""), std::invalid_argument);
}
