// Actions print as <stage><F|I|W|B><microbatch> and parse back.
#include "schedulers/policies/action.hpp"

#include <doctest/doctest.h>

using namespace troupe::sched;

TEST_CASE("actions print as stage, kind letter and microbatch") {
  CHECK(to_string(fwd(2, 0)) == "2F0");
  CHECK(to_string(wgrad(1, 3)) == "1W3");
  CHECK(to_string(igrad(12, 15)) == "12I15");
  std::vector<action> order{fwd(0, 0), fwd(0, 1), bwd(0, 0)};
  CHECK(to_string(std::span<const action>(order)) == "0F0 0F1 0B0");
}

TEST_CASE("printed actions parse back to the same actions") {
  for (auto a : {fwd(0, 0), bwd(3, 7), igrad(5, 11), wgrad(10, 2)}) {
    auto parsed = parse_action(to_string(a));
    REQUIRE(parsed);
    CHECK(*parsed == a);
  }
  auto list = parse_actions("0F0 0F1,0B0\t0B1");
  REQUIRE(list);
  CHECK(list->size() == 4);
  CHECK((*list)[2] == bwd(0, 0));
}

TEST_CASE("malformed actions are rejected saying what is wrong") {
  CHECK(parse_action("F0").error().message.find("no stage number") != std::string::npos);
  CHECK(parse_action("2X0").error().message.find("unknown kind 'X'") != std::string::npos);
  CHECK(parse_action("2F").error().message.find("no microbatch number") != std::string::npos);
  CHECK(parse_action("2F0x").error().message.find("trailing characters") != std::string::npos);
  auto list = parse_actions("0F0 0F1 oops");
  REQUIRE(!list);
  CHECK(list.error().message.find("action 3") != std::string::npos);
}

TEST_CASE("an F&B prints as its forward and backward joined by & and parses back") {
  auto a = overlap(fwd(1, 4), bwd(6, 0));
  CHECK(to_string(a) == "1F4&6B0");
  auto parsed = parse_action("1F4&6B0");
  REQUIRE(parsed);
  CHECK(*parsed == a);
  CHECK(parts(a).count == 2);
  CHECK(parts(a).part[1] == bwd(6, 0));
  CHECK(parse_action("1F4&6W0").error().message.find("joins a forward and a backward") != std::string::npos);
}
