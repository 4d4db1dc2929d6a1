// A ring member's bookkeeping (ring_peer.hpp), which the actors and the
// simulated clock share: chunks are applied in phase order whatever order they
// arrive in, each member sends 2(n-1) chunks a bucket, and ZeRO's gather waits
// for the shard's update.
#include "schedulers/sync/ring_peer.hpp"

#include <algorithm>
#include <random>
#include <stdexcept>

#include <doctest/doctest.h>

using namespace troupe::sched;

namespace {

/// A ring message: the sender's rank and the phase it sent.
struct tag {
  int from = -1, phase = -1;
};

struct ring_run {
  std::vector<ring_peer<tag>> peers;
  struct message {
    int to;
    ring_key key;
    tag chunk;
  };
  std::vector<message> wire;
  std::vector<int> sent, applied, reduced, scattered, gathered;
  std::mt19937 rng{11};

  ring_run(int n, bool zero)
      : sent(std::size_t(n)), applied(std::size_t(n)), reduced(std::size_t(n)), scattered(std::size_t(n)),
        gathered(std::size_t(n)) {
    for (int m = 0; m < n; ++m)
      peers.emplace_back("m" + std::to_string(m), n, m, zero);
  }
  int n() const { return static_cast<int>(peers.size()); }
  void run(int m, std::vector<ring_event<tag>> events) {
    auto i = std::size_t(m);
    for (auto& e : events)
      switch (e.what) {
      case ring_event<tag>::kind::send:
        ++sent[i];
        wire.push_back({(m + 1) % n(), e.key, {m, e.phase}});
        break;
      case ring_event<tag>::kind::apply:
        // Applied in phase order, each the chunk its predecessor sent in that phase.
        CHECK(e.phase == applied[i] % (2 * (n() - 1)));
        CHECK(e.chunk.from == (m + n() - 1) % n());
        CHECK(e.chunk.phase == e.phase);
        ++applied[i];
        break;
      case ring_event<tag>::kind::reduced:
        ++reduced[i];
        break;
      case ring_event<tag>::kind::scattered:
        CHECK(e.phase == n() - 1);
        ++scattered[i];
        break;
      case ring_event<tag>::kind::gathered:
        ++gathered[i];
        break;
      }
  }
  /// Delivers the messages on the wire in a random order until none is left.
  void deliver() {
    while (!wire.empty()) {
      std::uniform_int_distribution<std::size_t> pick(0, wire.size() - 1);
      auto k = pick(rng);
      auto msg = wire[k];
      wire.erase(wire.begin() + static_cast<std::ptrdiff_t>(k));
      run(msg.to, peers[std::size_t(msg.to)].receive(msg.key, msg.chunk.phase, msg.chunk));
    }
  }
};

} // namespace

TEST_CASE("every ring member applies its chunks in phase order and sends 2(n-1), whatever the arrival order") {
  for (int n : {2, 3, 5}) {
    ring_run r(n, false);
    // Members hand their bucket over late, in a shuffled order: chunks come before their turn.
    std::vector<int> order(std::size_t(n), 0);
    for (int m = 0; m < n; ++m)
      order[std::size_t(m)] = m;
    std::shuffle(order.begin(), order.end(), r.rng);
    for (int m : order) {
      r.run(m, r.peers[std::size_t(m)].take({3, 1}, 1001));
      CHECK(r.peers[std::size_t(m)].plan({3, 1}).chunk_elements() == (1001 + n - 1) / n);
    }
    r.deliver();
    for (int m = 0; m < n; ++m) {
      CHECK(r.sent[std::size_t(m)] == 2 * (n - 1));
      CHECK(r.applied[std::size_t(m)] == 2 * (n - 1));
      CHECK(r.reduced[std::size_t(m)] == 1);
      CHECK(r.peers[std::size_t(m)].in_flight() == 0);
    }
  }
}

TEST_CASE("a ZeRO shard stops after the reduce-scatter until its update, then gathers") {
  const int n = 4;
  ring_run r(n, true);
  for (int m = 0; m < n; ++m)
    r.run(m, r.peers[std::size_t(m)].take({0, 0}, 64));
  r.deliver();
  for (int m = 0; m < n; ++m) {
    CHECK(r.scattered[std::size_t(m)] == 1);
    CHECK(r.sent[std::size_t(m)] == n - 1);
    CHECK(r.gathered[std::size_t(m)] == 0);
  }
  CHECK_THROWS_AS(r.peers[0].gather({1, 0}), std::runtime_error); // a bucket it never had
  // Shards update at different times: an early gather's chunks wait for the late shard's update.
  for (int m = n - 1; m >= 0; --m) {
    r.run(m, r.peers[std::size_t(m)].gather({0, 0}));
    r.deliver();
  }
  for (int m = 0; m < n; ++m) {
    CHECK(r.gathered[std::size_t(m)] == 1);
    CHECK(r.sent[std::size_t(m)] == 2 * (n - 1));
    CHECK(r.applied[std::size_t(m)] == 2 * (n - 1));
  }
}

TEST_CASE("a ring of one is reduced, or scattered and gathered, without a message") {
  ring_run plain(1, false), zero(1, true);
  plain.run(0, plain.peers[0].take({0, 0}, 8));
  CHECK(plain.reduced[0] == 1);
  zero.run(0, zero.peers[0].take({0, 0}, 8));
  CHECK(zero.scattered[0] == 1);
  zero.run(0, zero.peers[0].gather({0, 0}));
  CHECK(zero.gathered[0] == 1);
  CHECK(plain.sent[0] + zero.sent[0] == 0);
  ring_run two(2, false);
  two.run(0, two.peers[0].take({0, 0}, 8));
  CHECK_THROWS_AS(two.peers[0].take({0, 0}, 8), std::runtime_error); // handed over twice
}
