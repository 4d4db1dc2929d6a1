// DDP's all-reduce peers count the tensor bytes they send, as ZeRO's shards
// and the sync actors do, so `--summary-json`'s byte ratios come from
// measurement: a peer reported done at its start and every peer read 0. With
// data_parallel.wire: bf16 they send half as much.
#include <cmath>
#include <map>
#include <string>

#include <doctest/doctest.h>

#include "ops/gpt.hpp"
#include "tests/integration/data_parallel_graph.hpp"

using namespace troupe;
using namespace troupe::testing;

TEST_CASE("DDP's all-reduce peers report sending 2(R-1)/R of their stage's gradient bytes a step") {
  auto got = run_in_process(dp_graph(2, 2, dp_batch));
  ops::gpt_config cfg{4, 64, 2, 32, 256};
  auto grad_bytes = ops::gpt_parameter_count(cfg, 0, 2) * 4; // stage 0 of 2: no loss in its buckets
  bool seen = false;
  for (const auto& s : got.summaries)
    if (s.actor == "r0s0_ar" || s.actor == "r1s0_ar") {
      seen = true;
      CAPTURE(s.actor);
      CHECK(s.bytes_sent * 2 == 2 * (2 - 1) * grad_bytes * dp_steps);
    } else if (s.actor.ends_with("_ar")) { // the last stage: its loss and a ring's padding ride along
      CAPTURE(s.actor);
      auto last_bytes = ops::gpt_parameter_count(cfg, 2, 4) * 4;
      CHECK(s.bytes_sent >= last_bytes * dp_steps);
      CHECK(s.bytes_sent <= (last_bytes + 64) * dp_steps);
    }
  CHECK(seen);
}

TEST_CASE("DDP with data_parallel.wire: bf16 sends half the bytes and stays within bf16 rounding of the f32 run") {
  auto text = dp_graph(2, 2, dp_batch);
  auto f32 = run_in_process(text);
  auto at = text.find("bucket: 64KB");
  REQUIRE(at != std::string::npos);
  auto bf16 = run_in_process(text.insert(at + 12, ", wire: bf16"));
  std::map<std::string, std::int64_t> sent;
  for (const auto& s : f32.summaries)
    sent[s.actor] = s.bytes_sent;
  int peers = 0;
  for (const auto& s : bf16.summaries)
    if (s.actor.ends_with("_ar")) {
      CAPTURE(s.actor);
      ++peers;
      CHECK(s.bytes_sent * 2 == sent.at(s.actor));
    }
  CHECK(peers == 4);
  REQUIRE(f32.val_loss);
  REQUIRE(bf16.val_loss);
  CHECK(std::isfinite(*bf16.val_loss));
  CHECK(*bf16.val_loss == doctest::Approx(*f32.val_loss).epsilon(1e-2));
  CHECK(*bf16.val_loss != *f32.val_loss); // the wire did change what the replicas summed
}
