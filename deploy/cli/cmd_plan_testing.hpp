// For the `troupe plan paths` and `troupe plan attention` tests: the command's
// --json answer, parsed.
#pragma once

#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/troupe_command.hpp"

namespace troupe::testing {

/// `troupe ARGS --json`, which must succeed, as JSON (after any progress lines
/// a long search prints on stderr, which run_troupe reads with stdout).
inline nlohmann::json troupe_json(const std::string& args) {
  auto r = run_troupe(args + " --json");
  REQUIRE_MESSAGE(r.code == 0, r.out);
  auto at = r.out.starts_with("{") ? 0 : r.out.find("\n{");
  REQUIRE_MESSAGE(at != std::string::npos, r.out);
  return nlohmann::json::parse(r.out.substr(at == 0 ? 0 : at + 1));
}

/// `troupe plan paths ARGS --json`, which must succeed, as JSON.
inline nlohmann::json plan_json(const std::string& args) {
  return troupe_json("plan paths " + args);
}

/// `troupe plan attention ARGS --json`, which must succeed, as JSON.
inline nlohmann::json plan_attention_json(const std::string& args) {
  return troupe_json("plan attention " + args);
}

} // namespace troupe::testing
