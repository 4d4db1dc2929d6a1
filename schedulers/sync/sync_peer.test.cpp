// The outer_sync's bookkeeping (sync_peer.hpp), which the actor and the
// simulated clock share: parts that come before their prepare wait for it, an
// exchange is applied only once the stage performed it and it is complete, and
// a lost replica is sent nothing.
#include "schedulers/sync/sync_peer.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <stdexcept>

#include <doctest/doctest.h>

using namespace troupe;
using namespace troupe::sched;

namespace {

std::vector<sync_peer> peers(int n, std::vector<float> start) {
  local_update_spec spec;
  spec.algorithm = "desloc"; // plain averaging: the mean is the new value
  spec.options = {{"periods.params", "1"}, {"periods.momentum", "1"}, {"periods.variance", "1"}};
  std::vector<sync_peer> out;
  for (int r = 0; r < n; ++r) {
    out.emplace_back("r" + std::to_string(r), r, n);
    out.back().start(*find_sync_method("desloc"), sync_setup{spec, 0, 0, 0, {start, {}, {}}});
  }
  return out;
}

/// Delivers `parts` (and what they make the receivers send) until none is left.
void deliver(std::vector<sync_peer>& p, std::vector<sync_part> parts) {
  while (!parts.empty()) {
    auto m = std::move(parts.back());
    parts.pop_back();
    for (auto& s : p[static_cast<std::size_t>(m.to)].receive(std::move(m)))
      parts.push_back(std::move(s));
  }
}

} // namespace

TEST_CASE("a part before its prepare waits for it, and an exchange is applied once performed and complete") {
  auto p = peers(2, std::vector<float>(3000, 0.0f));
  auto from0 = p[0].prepare(4, 0, std::vector<float>(3000, 1.0f));
  REQUIRE(from0.size() == 1); // its part of replica 1's chunk
  CHECK(p[0].bytes_sent() == static_cast<std::int64_t>(from0.front().payload.wire_bytes()));
  deliver(p, std::move(from0)); // replica 1 has not prepared: held
  CHECK(p[1].applicable().empty());
  p[0].perform(4, 0, std::vector<float>(3000, 1.0f));
  CHECK(p[0].applicable().empty()); // replica 1's parts are still to come
  deliver(p, p[1].prepare(4, 0, std::vector<float>(3000, 3.0f)));
  CHECK(p[1].applicable().empty()); // complete, but its stage has not performed yet
  p[1].perform(4, 0, std::vector<float>(3000, 3.0f));
  for (auto& peer : p) {
    REQUIRE(peer.applicable() == std::vector<int>{0});
    auto [step, values] = peer.apply(0);
    CHECK(step == 4);
    CHECK(values.front() == 2.0f);
    CHECK(values.back() == 2.0f);
    CHECK(peer.performed() == 1);
  }
  for (auto& peer : p)
    CHECK(peer.bytes_sent() == 3000 * 4); // a ring all-reduce's 2(n-1)/n of the fragment, n = 2
}

TEST_CASE("a peer refuses a perform before its prepare and sends nothing to a lost replica") {
  auto p = peers(3, std::vector<float>(10, 0.0f));
  CHECK_THROWS_AS(p[0].perform(1, 0, std::vector<float>(10, 1.0f)), std::runtime_error);
  CHECK(p[0].lose(2).empty()); // nothing under way
  for (const auto& part : p[0].prepare(1, 0, std::vector<float>(10, 1.0f)))
    CHECK(part.to == 1);
}

namespace {

std::vector<float> noisy(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x)
    v = d(gen);
  return x;
}

/// Every peer's exchange of fragment 0 after `step` steps of `locals`: prepared
/// in `order`, delivered, performed and applied; the values each ends with.
std::map<int, std::vector<float>> exchange_all(std::map<int, sync_peer*> p, std::int64_t step,
                                               const std::map<int, std::vector<float>>& locals,
                                               std::vector<int> order) {
  std::vector<sync_part> parts;
  auto deliver_all = [&] {
    while (!parts.empty()) {
      auto m = std::move(parts.back());
      parts.pop_back();
      REQUIRE(p.count(m.to)); // nothing to a replica not in the run
      for (auto& s : p.at(m.to)->receive(std::move(m)))
        parts.push_back(std::move(s));
    }
  };
  for (int r : order) {
    parts = p.at(r)->prepare(step, 0, locals.at(r));
    deliver_all();
    p.at(r)->perform(step, 0, locals.at(r));
  }
  std::map<int, std::vector<float>> out;
  for (auto& [r, peer] : p) {
    CAPTURE(r);
    REQUIRE(peer->applicable() == std::vector<int>{0});
    out[r] = peer->apply(0).second;
  }
  return out;
}

} // namespace

namespace {

/// Replica 3 of 4 is lost, the survivors take an outer step without it, then
/// it comes back with replica 0's outer state (the donor's own values, such as
/// SparseLoCo's error feedback, at zero). The exchange after that must include
/// it (a survivor that left it out would never be complete) and must equal the
/// same exchange run by 4 fresh replicas: the survivors from their own states,
/// the joiner from the donor's with `own` zeroed here by hand. Returns each
/// replica's values after it.
std::map<int, std::vector<float>> rejoin_matches_clean_exchange(local_update_spec spec,
                                                                const std::vector<std::string>& own = {}) {
  const auto* method = find_sync_method(spec.algorithm);
  REQUIRE(method);
  REQUIRE(method->rejoins);
  CHECK(method->own == own);
  const std::size_t n = 3000;
  auto start = noisy(n, 1);
  std::vector<sync_peer> p;
  for (int r = 0; r < 4; ++r) {
    p.emplace_back("r" + std::to_string(r), r, 4);
    p.back().start(*method, sync_setup{spec, 0, 0, 5, {start}});
  }
  std::map<int, std::vector<float>> locals;
  for (int r = 0; r < 4; ++r)
    locals[r] = noisy(n, 10 + static_cast<unsigned>(r));
  for (int r = 0; r < 3; ++r)
    CHECK(p[static_cast<std::size_t>(r)].lose(3).empty());
  // Replica 2 is slow: it hears of the rejoin (after step 2) before it prepares
  // step 2's exchange, which must still leave replica 3 out.
  std::vector<sync_part> parts;
  for (int r : {0, 1}) {
    for (auto& s : p[static_cast<std::size_t>(r)].prepare(2, 0, locals[r]))
      parts.push_back(std::move(s));
    p[static_cast<std::size_t>(r)].perform(2, 0, locals[r]);
  }
  for (int r = 0; r < 3; ++r)
    CHECK(p[static_cast<std::size_t>(r)].rejoin(3, 2, 1));
  CHECK_THROWS_AS(p[0].rejoin(3, 2, 1), std::runtime_error); // it is no longer lost
  for (auto& s : p[2].prepare(2, 0, locals[2]))
    parts.push_back(std::move(s));
  p[2].perform(2, 0, locals[2]);
  std::map<int, sync_peer*> survivors{{0, &p[0]}, {1, &p[1]}, {2, &p[2]}};
  while (!parts.empty()) {
    auto m = std::move(parts.back());
    parts.pop_back();
    REQUIRE(m.to != 3); // step 2's exchange leaves it out
    for (auto& s : survivors.at(m.to)->receive(std::move(m)))
      parts.push_back(std::move(s));
  }
  std::map<int, std::vector<float>> after2;
  for (auto& [r, peer] : survivors) {
    REQUIRE(peer->applicable() == std::vector<int>{0});
    after2[r] = peer->apply(0).second;
  }
  // The joiner: replica 0's state, as a live peer hands it over.
  std::map<int, sync_state> states;
  for (int r = 0; r < 3; ++r)
    states[r] = p[static_cast<std::size_t>(r)].save();
  auto donated = states[0];
  forget_own(*method, donated);
  sync_peer joiner("r3", 3, 4);
  joiner.resume_at(p[0].performed(), p[0].prepared());
  CHECK(joiner.start(*method, sync_setup{spec, 3, 4, 5, {start}}, donated).empty());
  states[3] = states[0];
  for (const auto& name : own) {
    auto& v = states[3].values.at(name);
    CHECK(std::any_of(v.begin(), v.end(), [](float x) { return x != 0; })); // the donor's is not zero
    std::fill(v.begin(), v.end(), 0.0f);
  }
  for (int r = 0; r < 4; ++r)
    locals[r] = noisy(n, 20 + static_cast<unsigned>(r));
  auto got = exchange_all({{0, &p[0]}, {1, &p[1]}, {2, &p[2]}, {3, &joiner}}, 4, locals, {3, 1, 0, 2});
  std::vector<sync_peer> ref;
  for (int r = 0; r < 4; ++r) {
    ref.emplace_back("ref" + std::to_string(r), r, 4);
    ref.back().resume_at(p[0].performed(), {});
    ref.back().start(*method, sync_setup{spec, r, 4, 5, {start}}, states[r]);
  }
  auto want = exchange_all({{0, &ref[0]}, {1, &ref[1]}, {2, &ref[2]}, {3, &ref[3]}}, 4, locals, {0, 1, 2, 3});
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(std::memcmp(got[r].data(), want[r].data(), n * sizeof(float)) == 0);
  }
  CHECK(std::memcmp(want[0].data(), after2[0].data(), n * sizeof(float)) != 0);
  // An exchange of a later step already under way without it: too late to come back there.
  p[1].lose(3); // lost again
  p[1].prepare(6, 0, locals[1]);
  CHECK_THROWS_WITH_AS(p[1].rejoin(3, 5, 2), doctest::Contains("already under way without it"), std::runtime_error);
  return got;
}

} // namespace

TEST_CASE("a replica that rejoins with a live peer's state is in the next exchange, and every replica agrees") {
  SUBCASE("DiLoCo: a mean over all four, which every replica holds") {
    local_update_spec spec;
    spec.algorithm = "diloco", spec.sync_every = 2;
    auto got = rejoin_matches_clean_exchange(spec);
    for (int r = 1; r < 4; ++r)
      CHECK(got[r] == got[0]);
  }
  SUBCASE("SparseLoCo: the joiner's part in the gather, its error feedback its own from zero") {
    local_update_spec spec;
    spec.algorithm = "sparseloco", spec.sync_every = 2, spec.options = {{"density", "0.05"}};
    auto got = rejoin_matches_clean_exchange(spec, {"error"});
    for (int r = 1; r < 4; ++r)
      CHECK(got[r] == got[0]);
  }
  SUBCASE("NoLoCo: in its group of the next exchange, with the donor's slow weights and momentum") {
    local_update_spec spec;
    spec.algorithm = "noloco", spec.sync_every = 2, spec.options = {{"group", "2"}, {"route", "chain"}};
    rejoin_matches_clean_exchange(spec);
  }
}

TEST_CASE("a replica can rejoin only where no exchange is under way") {
  local_update_spec spec;
  spec.algorithm = "diloco", spec.sync_every = 4;
  const auto& diloco = *find_sync_method("diloco");
  CHECK(first_quiet_step(diloco, spec, 3, 100) == 3); // prepared and performed after the same step
  CHECK(performs_through(diloco, spec, 9) == 2);      // after steps 4 and 8
  CHECK(first_quiet_step(diloco, spec, 100, 100) == -1);
  // Streaming DiLoCo: 2 fragments every 4 steps, 2 apart, each performed 1 step late.
  spec.algorithm = "streaming_diloco";
  spec.options = {{"fragments", "2"}, {"delay", "1"}, {"alpha", "0"}};
  const auto& streaming = *find_sync_method("streaming_diloco");
  auto quiet = first_quiet_step(streaming, spec, 1, 100);
  REQUIRE(quiet > 0);
  auto schedule = streaming.schedule(spec); // nothing under way after `quiet` steps, something before
  std::set<int> open;
  bool busy_before = false;
  for (std::int64_t s = 1; s <= quiet; ++s) {
    for (auto e : schedule->after_inner_step())
      e.what == fragment_event::kind::prepare ? (void)open.insert(e.fragment) : (void)open.erase(e.fragment);
    busy_before |= s < quiet && !open.empty();
  }
  CHECK(open.empty());
  CHECK(busy_before);
}

TEST_CASE("a rejoin decided before the replica was lost again changes nothing: the exchange goes on without it") {
  // DiLoCo over 3 replicas: replica 2 is lost, comes back, and is lost again on
  // its way back. A survivor that hears of the second loss before the loader's
  // (first) decision must leave it out: taking it back would wait for its parts
  // for ever.
  local_update_spec spec;
  spec.algorithm = "diloco", spec.sync_every = 2;
  const auto* method = find_sync_method("diloco");
  const std::size_t n = 300;
  std::vector<sync_peer> p;
  for (int r = 0; r < 3; ++r) {
    p.emplace_back("r" + std::to_string(r), r, 3);
    p.back().start(*method, sync_setup{spec, 0, 0, 0, {noisy(n, 1)}});
  }
  for (auto* peer : {&p[0], &p[1]})
    peer->lose(2);
  p[0].lose(2); // replica 0 hears of the second loss first
  CHECK(p[0].losses(2) == 2);
  CHECK(!p[0].rejoin(2, 4, 1)); // the decision knew of one loss: stale here
  CHECK(p[1].rejoin(2, 4, 1));  // not yet here
  p[1].lose(2);                 // then the second loss arrives: out again
  std::map<int, std::vector<float>> locals{{0, noisy(n, 2)}, {1, noisy(n, 3)}};
  auto got = exchange_all({{0, &p[0]}, {1, &p[1]}}, 6, locals, {0, 1}); // neither waits for replica 2
  CHECK(got[0] == got[1]);
  CHECK(p[0].rejoin(2, 8, 2)); // a later decision that knew of both losses takes it back
}
