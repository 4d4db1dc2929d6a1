// Attention servers across processes (#15): 2 replicas launched as 2 node
// processes, each replica's stages serving the other's documents in place, give
// the one-process colocated loss curve; so do separate servers on node 0.
#include <filesystem>
#include <string>

#include <doctest/doctest.h>

#include "tests/integration/troupe_process.hpp"

namespace fs = std::filesystem;
using namespace troupe::testing;

TEST_CASE("attention servers across 2 node processes follow the one-process colocated curve") {
  auto dir = small_pipeline_graph("mp_attention", 4, "data_parallel: {replicas: 2}\n");
  auto graph = (dir / "graph.yaml").string();
  auto losses = [&](const std::string& args, const std::string& name) {
    auto summary = dir / (name + ".json");
    auto out = dir / (name + ".txt");
    INFO(name);
    REQUIRE(sh(troupe_exe() + " " + args + " " + graph + " --no-trace --summary-json " + summary.string() + " > " +
               out.string() + " 2>&1") == 0);
    return std::pair{summary_losses(summary), slurp(out)};
  };
  // Documents dealt heaviest first, so the plan moves replica 0's attention to replica 1.
  const std::string docs = " --set data.documents=long_tail --set data.deal=heaviest_first";
  auto [one, one_out] = losses("run" + docs, "colocated");
  auto [in_place, in_place_out] =
    losses("launch --set cluster.nodes=2 --set attention.servers=in_place" + docs, "in_place");
  auto [apart, apart_out] = losses("launch --set cluster.nodes=2 --set attention.servers=2" + docs, "apart");
  REQUIRE(one.size() == 4);
  for (const auto* got : {&in_place, &apart}) {
    REQUIRE(got->size() == one.size());
    for (std::size_t i = 0; i < one.size(); ++i) {
      CAPTURE(i);
      CHECK((*got)[i] == doctest::Approx(one[i]).epsilon(1e-5));
    }
  }
  // Both ran with servers: replica 0's stages report the balance the plan gave.
  CHECK(in_place_out.find("attention pairs per server") != std::string::npos);
  CHECK(apart_out.find("attention pairs per server") != std::string::npos);
}
