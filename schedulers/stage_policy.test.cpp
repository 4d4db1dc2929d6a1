// Policies are made by name from a registry that plugins can extend.
#include "schedulers/stage_policy.hpp"

#include <doctest/doctest.h>

#include "schedulers/harness.hpp"

using namespace troupe::sched;

TEST_CASE("an unknown policy name fails with the list of valid ones") {
  auto p = make_policy("1f1c", {});
  REQUIRE(!p);
  CHECK(p.error().message.find("unknown policy '1f1c'") != std::string::npos);
  for (const char* name : {"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "table"})
    CHECK(p.error().message.find(name) != std::string::npos);
}

TEST_CASE("built-in policies report their memory bound and whether they split backward") {
  policy_params params;
  params.ranks = 4;
  params.microbatches = 8;
  params.rank = 1;
  auto one = make_policy("1f1b", params);
  REQUIRE(one);
  CHECK((*one)->name() == "1f1b");
  CHECK((*one)->in_flight_limit() == 3);
  CHECK(!(*one)->splits_backward());
  auto zb = make_policy("zb_h1", params);
  REQUIRE(zb);
  CHECK((*zb)->splits_backward());
  CHECK((*zb)->in_flight_limit() == 3);
  auto gp = make_policy("gpipe", params);
  REQUIRE(gp);
  CHECK((*gp)->in_flight_limit() == 0);
  CHECK(!policy_summary("zb_h1").empty());
}

TEST_CASE("bad policy parameters are refused with the reason") {
  policy_params params;
  params.ranks = 4;
  params.microbatches = 8;
  params.rank = 4;
  CHECK(make_policy("1f1b", params).error().message.find("rank 4 is outside 0..3") != std::string::npos);
  params.rank = 0;
  params.chunks = 2;
  CHECK(make_policy("1f1b", params).error().message.find("interleaved_1f1b") != std::string::npos);
  params.chunks = 1;
  params.options["overtakes"] = "FX";
  CHECK(make_policy("1f1b", params).error().message.find("pairs of F, B, I, W") != std::string::npos);
  params.options = {{"patience", "soon"}};
  CHECK(make_policy("zb_h1", params).error().message.find("patience") != std::string::npos);
}

namespace {

// Backward first, whatever is ready, within 1F1B's bound: the naive rule.
struct backward_first : stage_policy {
  int limit;
  explicit backward_first(int l) : limit(l) {}
  std::string_view name() const override { return "backward_first"; }
  int in_flight_limit() const override { return limit; }
  std::optional<action> next(const stage_queue& q) override {
    if (!q.ready_backward(0).empty())
      return bwd(q.rank(), *q.ready_backward(0).begin());
    if (!q.ready_forward(0).empty() && q.in_flight() < limit)
      return fwd(q.rank(), *q.ready_forward(0).begin());
    return std::nullopt;
  }
};

} // namespace

TEST_CASE("a registered policy is made by name like the built-in ones") {
  register_policy("backward_first", "test policy", [](const policy_params& p) -> expected<policy_ptr> {
    return policy_ptr{new backward_first(p.ranks - p.rank)};
  });
  auto names = policy_names();
  CHECK(std::find(names.begin(), names.end(), "backward_first") != names.end());
  sim_config c;
  auto r = simulate(c, "backward_first");
  REQUIRE(r);
  CHECK(to_string(std::span<const action>(r->orders[0])) ==
        "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7");
}
