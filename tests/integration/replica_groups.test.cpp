// Local-update training across replica groups that sync every step inside
// (torchft's DiLoCo over HSDP; #25): a stage's step boundary stacks an inner
// sync (a DDP ring or ZeRO's shards over its group) under the method's outer
// exchange between the groups.
#include <cmath>
#include <set>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/data_parallel_graph.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

/// 2 stages over `replicas` replicas of ZeRO stage `zero`, with `local_update` when given.
std::string grouped(int replicas, int zero, const std::string& local_update) {
  return dp_graph(replicas, 2, dp_batch, local_update.empty() ? "" : "local_update: " + local_update + "\n", 64, zero);
}

load_result load(const std::string& text) {
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  return load_graph_text(text, "groups.yaml", opts);
}

} // namespace

TEST_CASE("one replica group of ZeRO with DiLoCo at H = 1, outer lr 1 and no momentum is ZeRO over the same replicas") {
  for (int zero : {1, 2}) {
    CAPTURE(zero);
    auto zero_alone = run_in_process(grouped(2, zero, ""));
    auto one_group = run_in_process(grouped(
      2, zero, "{algorithm: diloco, sync_every: 1, outer: {lr: 1, momentum: 0, nesterov: false}, replica_groups: 1}"));
    check_same_curve(one_group.losses, zero_alone.losses);
    // The exchange is applied, not skipped: an outer lr of 0.5 halves every update.
    auto half = run_in_process(
      grouped(2, zero,
              "{algorithm: diloco, sync_every: 1, outer: {lr: 0.5, momentum: 0, nesterov: false}, replica_groups: 1}"));
    CHECK(std::fabs(half.losses.back() - zero_alone.losses.back()) > 1e-4 * zero_alone.losses.back());
  }
}

TEST_CASE("ZeRO inside two replica groups of DiLoCo follows a DDP ring inside them to 1e-5") {
  const std::string lu = "{algorithm: diloco, sync_every: 2, replica_groups: 2}";
  auto ring = run_in_process(grouped(4, 0, lu));
  for (int zero : {1, 2}) {
    CAPTURE(zero);
    check_same_curve(run_in_process(grouped(4, zero, lu)).losses, ring.losses);
  }
  // Groups are not one replica each: every replica on its own trains another curve.
  auto each_alone = run_in_process(grouped(4, 0, "{algorithm: diloco, sync_every: 2}"));
  CHECK(std::fabs(each_alone.losses.back() - ring.losses.back()) > 1e-4 * ring.losses.back());
}

TEST_CASE("replica groups keep their rings inside and join the same place of every group") {
  auto loaded = load(grouped(4, 1, "{algorithm: streaming_diloco, sync_every: 2, fragments: 2, replica_groups: 2}"));
  INFO(to_string(loaded.errors));
  REQUIRE(loaded.ok());
  const auto& g = *loaded.graph;
  CHECK(g.sync_group_size() == 2);
  std::set<std::pair<std::string, std::string>> links;
  for (const auto& c : g.channels)
    links.emplace(c.from, c.to);
  // ZeRO's ring of position 0 in group 0 is r0 -> r1 -> r0; group 1's is r2 -> r3 -> r2.
  CHECK(links.contains({"r0s0_os", "r1s0_os"}));
  CHECK(links.contains({"r2s0_os", "r3s0_os"}));
  CHECK(!links.contains({"r1s0_os", "r2s0_os"}));
  // The outer exchange joins the first replicas of the groups, and the second ones.
  CHECK(links.contains({"r0s0_sync", "r2s0_sync"}));
  CHECK(links.contains({"r1s0_sync", "r3s0_sync"}));
  CHECK(!links.contains({"r0s0_sync", "r1s0_sync"}));
}

TEST_CASE("replica groups that cannot be formed are refused at the key that says why") {
  auto uneven = load(grouped(4, 0, "{algorithm: diloco, replica_groups: 3}"));
  REQUIRE(!uneven.ok());
  CHECK(to_string(uneven.errors)
          .find("local_update.replica_groups: 3 groups do not cut data_parallel.replicas (4) "
                "into equal groups") != std::string::npos);
  auto alone = load(grouped(2, 1, "{algorithm: diloco}"));
  REQUIRE(!alone.ok());
  CHECK(to_string(alone.errors).find("set local_update.replica_groups below data_parallel.replicas (2)") !=
        std::string::npos);
  auto desloc = load(grouped(4, 1, "{algorithm: desloc, replica_groups: 2}"));
  REQUIRE(!desloc.ok());
  CHECK(to_string(desloc.errors).find("DES-LOC averages Adam's moments, which ZeRO's shards hold in slices") !=
        std::string::npos);
}
