// The V-shaped schedules and interleaved 1F1B train across node processes
// (#28 "Done when"): zbv, v_half, v_min, dualpipev and interleaved_1f1b on 2
// and 4 stages of two chunks each, with two data-parallel replicas, launched
// over two node processes, follow the one-stage loss curve of the same
// replicas to 1e-5. Each stage then sends its chunks' activations, gradients
// and ring buckets over channels between the nodes.
#include <cmath>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/troupe_process.hpp"

using namespace troupe::testing;

namespace {

/// The main example's model family at a size a test runs in seconds: 8 layers,
/// so 4 stages × 2 chunks hold a layer each. 8 microbatches: dualpipev needs
/// at least 2 × stages.
std::string graph(int stages, const std::string& schedule, int virt) {
  return fmt::format(R"(model:    {{layers: 8, d_model: 32, heads: 2, context: 16, vocab: 256}}
data:     {{corpus: kjv, batch: 2, seed: 7}}
train:    {{steps: 4, lr: 2.0e-3, warmup: 2, eval_batches: 1}}
pipeline: {{stages: {}, microbatches: 8, schedule: {}, virtual: {}}}
data_parallel: {{replicas: 2, bucket: 16KB}}
)",
                     stages, schedule, virt);
}

void check_curve(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    CHECK(std::fabs(got[i] - want[i]) <= 1e-5 * std::fabs(want[i]));
}

} // namespace

TEST_CASE("zbv, v_half, v_min, dualpipev and interleaved 1F1B with data parallelism across two node processes "
          "follow the one-stage curve to 1e-5") {
  auto one = run_one_and_launched("v_mp_one", graph(1, "gpipe", 1));
  REQUIRE(one.one.size() == 4);
  check_curve(one.launched, one.one); // the reference itself, launched
  for (int stages : {2, 4})
    for (std::string schedule : {"zbv", "v_half", "v_min", "dualpipev", "interleaved_1f1b"}) {
      INFO(schedule, " on ", stages, " stages");
      auto r = run_one_and_launched(fmt::format("v_mp_{}_{}", schedule, stages), graph(stages, schedule, 2));
      INFO(r.launched_out);
      check_curve(r.one, one.one);
      check_curve(r.launched, one.one);
    }
}
