// `troupe sim` on SkipPipe's geo-distributed setting (examples/skippipe-geo20.yaml,
// #16): the plan of `troupe plan paths` run by the router and stage cores over the
// network's links, against the full pipeline planned alike.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/troupe_command.hpp"

using troupe::testing::run_troupe;

TEST_CASE("troupe sim runs the geo20 SkipPipe plan faster than the full pipeline, near the plan's estimates") {
  auto r = run_troupe("sim examples/skippipe-geo20.yaml --steps 2 --json");
  REQUIRE_MESSAGE(r.code == 0, r.out);
  auto j = nlohmann::json::parse(r.out)["skip"];
  const double planned = j["iteration_s"], full = j["full_iteration_s"];
  CHECK(planned < full);
  CHECK(j["speedup_over_full"].get<double>() > 1.3);
  // The simulator runs gpipe's order (not the plan's earliest-arrived first), the
  // head instead of SkipPipe's f₀/4 loss, and the norm reduction over the links.
  CHECK(planned == doctest::Approx(j["plan_estimate_s"].get<double>()).epsilon(0.10));
  CHECK(full == doctest::Approx(j["full_plan_estimate_s"].get<double>()).epsilon(0.10));
  auto text = run_troupe("sim examples/skippipe-geo20.yaml --steps 1");
  CHECK(text.code == 0);
  CHECK(text.has("full pipeline"));
  CHECK(text.has("the plan's estimate"));
}
