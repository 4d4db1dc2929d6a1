// A round of core attention priced colocated and over in-place servers: the
// plan's balance, the straggler it removes, nothing moved when nothing differs.
#include <algorithm>

#include <doctest/doctest.h>

#include "schedulers/sim/attention_sim.hpp"

using namespace troupe::sched;

namespace {

/// An 8B-class layer on an A100, servers joined by InfiniBand.
attention_costs a100_costs() {
  cost_settings s;
  s.device = *device_preset("a100_80gb");
  transformer_shape m{32, 4096, 32, 32768, 32000, 2};
  return attention_costs_of(m, s, link_spec{5e-6, 25e9});
}

/// `replicas` replicas of 2 nano-batches of one 32k window each; replica 0's
/// windows are one document, the others' 32 documents of 1k.
round_documents one_long(int replicas) {
  round_documents docs(static_cast<std::size_t>(replicas), std::vector<std::vector<std::int64_t>>(2));
  for (int r = 0; r < replicas; ++r)
    for (auto& nano : docs[static_cast<std::size_t>(r)])
      nano = r == 0 ? std::vector<std::int64_t>{32768} : std::vector<std::int64_t>(32, 1024);
  return docs;
}

double most(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end());
}

} // namespace

TEST_CASE("in-place servers balance each nano-batch's pairs to within 1 + tolerance") {
  for (double tolerance : {0.05, 0.1, 0.3}) {
    auto r = price_round(one_long(16), a100_costs(), true, tolerance);
    CHECK(r.worst_after <= 1 + tolerance + 1e-9);
    auto before = *std::max_element(r.before.begin(), r.before.end());
    auto after = *std::max_element(r.after.begin(), r.after.end());
    CHECK(after < before);
    std::int64_t sum_before = 0, sum_after = 0;
    for (std::size_t i = 0; i < r.before.size(); ++i)
      sum_before += r.before[i], sum_after += r.after[i];
    CHECK(sum_after == sum_before); // pairs are moved, not made
    CHECK(r.bytes > 0);
  }
}

TEST_CASE("in-place servers beat colocated attention when one replica draws the long documents") {
  const auto c = a100_costs();
  auto colocated = price_round(one_long(4), c, false, 0.1);
  auto in_place = price_round(one_long(4), c, true, 0.1);
  // Colocated, replica 0 is the straggler; in place every replica waits for the slowest server.
  CHECK(colocated.forward[0] == most(colocated.forward));
  CHECK(colocated.forward[1] < colocated.forward[0]);
  CHECK(most(in_place.forward) < most(colocated.forward));
  CHECK(most(in_place.backward) < most(colocated.backward));
  CHECK(most(colocated.forward) / most(in_place.forward) > 1.5); // 0.304 s against 0.187 s
}

TEST_CASE("one document spread over many servers can cost more than it saves on a slow link") {
  // 16 servers at 25 GB/s: the long document's home sends its keys and values to
  // 15 helpers (11.7 GB a round), more than the other nano-batch's compute hides.
  // The planner balances pairs, not bytes: the simulator charges the bytes.
  const auto c = a100_costs();
  auto colocated = price_round(one_long(16), c, false, 0.1);
  auto in_place = price_round(one_long(16), c, true, 0.1);
  CHECK(most(in_place.forward) > most(colocated.forward));
  auto fast = c;
  fast.link.bandwidth = 1e12;
  CHECK(most(price_round(one_long(16), fast, true, 0.1).forward) < most(colocated.forward));
}

TEST_CASE("uniform documents take the same time colocated and in place, moving nothing") {
  round_documents docs(8, std::vector<std::vector<std::int64_t>>(2, std::vector<std::int64_t>{8192, 8192, 16384}));
  const auto c = a100_costs();
  auto colocated = price_round(docs, c, false, 0.1);
  auto in_place = price_round(docs, c, true, 0.1);
  CHECK(in_place.bytes == 0);
  CHECK(in_place.forward == colocated.forward);
  CHECK(in_place.backward == colocated.backward);
  CHECK(in_place.worst_after == 1.0);
}

TEST_CASE("two nano-batches hide the moved bytes behind each other's compute; one leaves them exposed") {
  const auto c = a100_costs(); // 25 GB/s between servers
  auto free = c;
  free.link = {}; // no latency, unlimited bandwidth
  auto docs = one_long(4);
  round_documents single(docs.size(), std::vector<std::vector<std::int64_t>>(1));
  for (std::size_t r = 0; r < docs.size(); ++r)
    for (const auto& nano : docs[r])
      single[r][0].insert(single[r][0].end(), nano.begin(), nano.end());
  CHECK(most(price_round(docs, c, true, 0.1).forward) ==
        doctest::Approx(most(price_round(docs, free, true, 0.1).forward)));
  CHECK(most(price_round(single, c, true, 0.1).forward) > most(price_round(single, free, true, 0.1).forward));
}
