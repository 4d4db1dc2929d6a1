// For the `troupe plan paths` tests: the command's --json answer, parsed.
#pragma once

#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/troupe_command.hpp"

namespace troupe::testing {

/// `troupe plan paths ARGS --json`, which must succeed, as JSON.
inline nlohmann::json plan_json(const std::string& args) {
  auto r = run_troupe("plan paths " + args + " --json");
  REQUIRE_MESSAGE(r.code == 0, r.out);
  return nlohmann::json::parse(r.out);
}

} // namespace troupe::testing
