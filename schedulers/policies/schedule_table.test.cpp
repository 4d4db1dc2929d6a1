// Explicit schedules: parsed from text or CSV, and rejected up front when they cannot run.
#include "schedulers/policies/schedule_table.hpp"

#include <fstream>

#include <doctest/doctest.h>

#include "schedulers/sim/harness.hpp"
#include "schedulers/policies/orders.hpp"

using namespace troupe::sched;

namespace {

schedule_table one_f_one_b(int p, int m) {
  schedule_table t;
  for (int r = 0; r < p; ++r)
    t.push_back(one_f_one_b_order(r, p, m));
  return t;
}

std::string why(const std::string& text, int p, int m, int v = 1) {
  auto t = parse_table(text);
  REQUIRE(t);
  auto ok = validate_table(*t, p, m, v);
  return ok ? std::string{} : ok.error().message;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("a table parses one rank per line from text or CSV, skipping comments") {
  auto t = parse_table("# two ranks\n0F0, 0F1, 0B0, 0B1\n\n1F0 1B0 1F1 1B1\n");
  REQUIRE(t);
  REQUIRE(t->size() == 2);
  CHECK((*t)[0][2] == bwd(0, 0));
  CHECK(to_string(*t) == "0F0 0F1 0B0 0B1\n1F0 1B0 1F1 1B1\n");
  auto bad = parse_table("0F0 0F1\n1F0 1Q0\n", "x.csv");
  REQUIRE(!bad);
  CHECK(contains(bad.error().message, "x.csv:2: rank 1: action 2"));
}

TEST_CASE("a binary table is refused as not text, and a malformed action is quoted with its bytes escaped") {
  auto binary = parse_table(std::string("\x89PNG\r\n\x1a\n\0\0", 10), "image.csv");
  REQUIRE(!binary);
  CHECK(binary.error().message == "image.csv: not a text file (byte 0x1a at offset 6); a schedule table is text, "
                                  "one line of actions per rank such as 0F0 0F1 0B0 0B1");
  auto latin1 = parse_table("0F0 0\xe9\xff"
                            "0\n",
                            "latin1.csv");
  REQUIRE(!latin1);
  CHECK(contains(latin1.error().message, "'0\\xe9\\xff0' is not an action (unknown kind '\\xe9'"));
  auto prose = parse_table(std::string(100, 'a'), "prose.csv");
  REQUIRE(!prose);
  CHECK(contains(prose.error().message, "'" + std::string(40, 'a') + "... (100 bytes)' is not an action"));
}

TEST_CASE("the canonical schedules pass validation") {
  CHECK(validate_table(one_f_one_b(4, 8), 4, 8, 1));
  schedule_table zb, il;
  for (int r = 0; r < 4; ++r) {
    zb.push_back(zb_h1_order(r, 4, 8));
    il.push_back(*interleaved_order(r, 4, 8, 2));
  }
  CHECK(validate_table(zb, 4, 8, 1));
  CHECK(validate_table(il, 4, 8, 2));
}

TEST_CASE("table rejects a backward before its forward, naming rank and action") {
  auto msg = why("0B0 0F0 0F1 0B1\n1F0 1B0 1F1 1B1\n", 2, 2);
  CHECK(contains(msg, "rank 0, action 1 (0B0): backward before its forward 0F0"));
  msg = why("0F0 0F1 0B0 0B1\n1F0 1W0 1I0 1F1 1I1 1W1\n", 2, 2);
  CHECK(contains(msg, "a whole backward B in a table that splits"));
  msg = why("0F0 0F1 0I0 0W0 0I1 0W1\n1F0 1W0 1I0 1F1 1I1 1W1\n", 2, 2);
  CHECK(contains(msg, "rank 1, action 2 (1W0): weight gradient before its input gradient 1I0"));
}

TEST_CASE("table rejects a missing or duplicate microbatch") {
  auto msg = why("0F0 0F1 0B0 0B1\n1F0 1B0 1F1\n", 2, 2);
  CHECK(contains(msg, "rank 1: microbatch 1 of stage 1 is missing 1B1"));
  msg = why("0F0 0F1 0B0 0B1\n1F0 1B0 1B1\n", 2, 2);
  CHECK(contains(msg, "rank 1, action 3 (1B1): backward before its forward 1F1 (missing)"));
  msg = why("0F0 0F1 0F1 0B0 0B1\n1F0 1B0 1F1 1B1\n", 2, 2);
  CHECK(contains(msg, "rank 0, action 3 (0F1): duplicate of action 2"));
  msg = why("0F0 0F1 0F2 0B0 0B1 0B2\n1F0 1B0 1F1 1B1\n", 2, 2);
  CHECK(contains(msg, "rank 0, action 3 (0F2): microbatch 2 is out of range"));
}

TEST_CASE("table rejects actions on a stage the rank does not run and a wrong rank count") {
  auto msg = why("0F0 1F0 0B0\n1F0 1B0\n", 2, 1);
  CHECK(contains(msg, "rank 0, action 2 (1F0): stage 1 does not run on rank 0"));
  msg = why("0F0 0B0\n", 2, 1);
  CHECK(contains(msg, "1 rank lines but the pipeline has 2 ranks"));
}

TEST_CASE("table rejects a deadlock across ranks, saying who waits for what") {
  // Rank 1 insists on microbatch 1 first while rank 0 only sends it after 0B0.
  auto msg = why("0F0 0B0 0F1 0B1\n1F1 1B1 1F0 1B0\n", 2, 2);
  CHECK(contains(msg, "deadlock"));
  CHECK(contains(msg, "rank 0, action 2 (0B0) waits for 1B0 on rank 1"));
  CHECK(contains(msg, "rank 1, action 1 (1F1) waits for 0F1 on rank 0"));
}

TEST_CASE("the deadlocking example table is rejected naming both stuck ranks") {
  auto t = load_table("examples/schedules/deadlock_2x2.csv");
  REQUIRE(t);
  auto ok = validate_table(*t, 2, 2, 1);
  REQUIRE(!ok);
  CHECK(contains(ok.error().message, "deadlock: rank 0, action 2 (0B0) waits for 1B0 on rank 1; "
                                     "rank 1, action 1 (1F1) waits for 0F1 on rank 0"));
}

TEST_CASE("the table policy replays a file and refuses a broken one when it is made") {
  const char* path = "/tmp/troupe_schedule_table_test.csv";
  {
    std::ofstream out(path);
    out << to_string(one_f_one_b(4, 8));
  }
  policy_params params;
  params.table_file = path;
  sim_config c;
  auto r = simulate(c, "table", params);
  REQUIRE(r);
  CHECK(r->orders == one_f_one_b(4, 8));
  CHECK(r->in_flight_limit == std::vector<int>{4, 3, 2, 1});
  {
    std::ofstream out(path);
    out << "0F0 0B0\n";
  }
  params.ranks = 4;
  auto bad = make_policy("table", params);
  REQUIRE(!bad);
  CHECK(contains(bad.error().message, "table: the table has 1 rank lines"));
  {
    std::ofstream out(path);
    out << "0F0 0F1 0B0 0B1\n1F0 1B0\n";
  }
  params.ranks = 2;
  auto uneven = make_policy("table", params); // m comes from the rows, so they must agree
  REQUIRE(!uneven);
  CHECK(contains(uneven.error().message, "rank 1 runs forwards for microbatches {0} but rank 0 for {0, 1}"));
  params.table_file = "/nonexistent/schedule.csv";
  CHECK(contains(make_policy("table", params).error().message, "cannot open"));
}

TEST_CASE("the example schedule files are valid and replay their schedules") {
  struct example {
    const char* file;
    const char* policy;
    int p, m, v;
  };
  for (auto e : {example{"examples/schedules/1f1b_4x8.csv", "1f1b", 4, 8, 1},
                 example{"examples/schedules/gpipe_4x8.csv", "gpipe", 4, 8, 1},
                 example{"examples/schedules/interleaved_4x8x2.csv", "interleaved_1f1b", 4, 8, 2},
                 example{"examples/schedules/zb_h1_4x8.csv", "zb_h1", 4, 8, 1}}) {
    CAPTURE(e.file);
    auto t = load_table(e.file);
    REQUIRE(t);
    CHECK(validate_table(*t, e.p, e.m, e.v));
    sim_config c;
    c.ranks = e.p;
    c.microbatches = e.m;
    c.chunks = e.v;
    auto mine = simulate(c, e.policy);
    REQUIRE(mine);
    CHECK(mine->orders == *t);
  }
}
