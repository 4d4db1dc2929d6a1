// The outer_sync's bookkeeping (sync_peer.hpp), which the actor and the
// simulated clock share: parts that come before their prepare wait for it, an
// exchange is applied only once the stage performed it and it is complete, and
// a lost replica is sent nothing.
#include "schedulers/sync/sync_peer.hpp"

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
