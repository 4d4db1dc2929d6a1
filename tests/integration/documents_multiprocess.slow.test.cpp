// Document masks across processes: a pipeline launched over 2 node processes
// with data.documents gives the one-process loss curve, and not the curve
// without documents (so the masks were not dropped at the process boundary).
#include <filesystem>
#include <string>

#include <doctest/doctest.h>

#include "tests/integration/troupe_process.hpp"

namespace fs = std::filesystem;
using namespace troupe::testing;

TEST_CASE("masks cross processes: 2 nodes with documents follow the one-process curve") {
  auto dir = small_pipeline_graph("mp_documents", 4, "");
  auto graph = (dir / "graph.yaml").string();
  auto losses = [&](const std::string& args, const std::string& name) {
    auto summary = dir / (name + ".json");
    REQUIRE(sh(troupe_exe() + " " + args + " " + graph + " --no-trace --summary-json " + summary.string() + " > " +
               (dir / (name + ".txt")).string() + " 2>&1") == 0);
    return summary_losses(summary);
  };
  auto one = losses("run --set data.documents=long_tail", "one");
  auto causal = losses("run", "causal");
  auto two = losses("launch --set cluster.nodes=2 --set data.documents=long_tail", "two");
  REQUIRE(one.size() == 4);
  REQUIRE(two.size() == one.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(two[i] == doctest::Approx(one[i]).epsilon(1e-6));
  }
  CHECK(causal != one);
}
