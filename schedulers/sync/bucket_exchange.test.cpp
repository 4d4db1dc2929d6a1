// DDP's direct bucket exchanges (#26): every replica gets each bucket's sum
// over the replicas, and after a replica is lost at any point of any step the
// replicas left apply the same sums, bit for bit, and finish every step.
#include "schedulers/sync/bucket_exchange.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include <doctest/doctest.h>

using namespace troupe::sched;

namespace {

constexpr int steps = 4, buckets = 3;
constexpr std::size_t values = 2500; // 3 rows of 1024 and a short one: chunks of unequal size

std::vector<float> bucket_values(int replica, int step, int bucket) {
  std::mt19937 gen(static_cast<unsigned>(1000 * replica + 10 * step + bucket));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(values);
  for (auto& x : v)
    x = d(gen);
  return v;
}

/// The sum of `who`'s values in replica order, in f32, as an owner makes it.
std::vector<float> sum_of(const std::vector<int>& who, int step, int bucket) {
  std::vector<float> acc(values, 0.0f);
  for (int r : who) {
    auto v = bucket_values(r, step, bucket);
    for (std::size_t i = 0; i < values; ++i)
      acc[i] += v[i];
  }
  return acc;
}

/// R replicas stepping as DDP does: each starts its buckets of a step one by
/// one, and the next step's only once every sum of this one is in. Messages
/// of each pair arrive in order, pairs interleaved at random. Replica `dead`
/// stops after `cut` of its own actions; a random prefix of what it had sent
/// still arrives; each survivor hears of the loss at a random moment after.
/// With `comeback`, once all have heard, it starts again (fresh, its old links
/// gone) at step J, two past the furthest survivor's; each survivor hears of
/// the rejoin at a random moment before it starts step J (the loader's word
/// comes before that step's microbatches), after parts of step J may have come.
struct run_result {
  std::map<int, std::map<std::pair<int, int>, std::vector<float>>> sums; ///< survivor -> (step, bucket) -> sum
  std::size_t most_held = 0;
  bool died = false;
  int back_at = -1; ///< the step the lost replica rejoined at (-1: it did not)
};

run_result simulate(int replicas, int dead, int cut, unsigned seed, int total = steps, bool comeback = false) {
  std::mt19937 rng(seed);
  std::vector<bucket_exchanges> ex;
  for (int r = 0; r < replicas; ++r)
    ex.emplace_back(replicas, r, wire_format::f32);
  std::map<std::pair<int, int>, std::deque<bucket_send>> links; // (from, to) -> in order
  std::vector<int> step(static_cast<std::size_t>(replicas), 0), next(static_cast<std::size_t>(replicas), 0),
    done(static_cast<std::size_t>(replicas), 0), actions(static_cast<std::size_t>(replicas), 0);
  std::vector<bool> heard(static_cast<std::size_t>(replicas), false),
    pending(static_cast<std::size_t>(replicas), false);
  run_result out;
  auto post = [&](int from, std::vector<bucket_send> sends) {
    for (auto& s : sends)
      links[{from, s.send.to}].push_back(std::move(s));
  };
  auto collect = [&](int r) {
    for (auto& b : ex[static_cast<std::size_t>(r)].take_done()) {
      CHECK(b.step == step[static_cast<std::size_t>(r)]);
      ++done[static_cast<std::size_t>(r)];
      out.sums[r][{static_cast<int>(b.step), b.bucket}] = std::move(b.values);
    }
    out.most_held = std::max(out.most_held, ex[static_cast<std::size_t>(r)].held());
  };
  auto alive = [&](int r) { return !(out.died && r == dead && out.back_at < 0); };
  for (int tick = 0; tick < 1'000'000; ++tick) {
    bool all_heard = true;
    for (int r = 0; r < replicas; ++r)
      all_heard = all_heard && (r == dead || heard[static_cast<std::size_t>(r)]);
    if (comeback && out.died && out.back_at < 0 && !heard[static_cast<std::size_t>(dead)] && all_heard) {
      int j = 2 + *std::max_element(step.begin(), step.end());
      heard[static_cast<std::size_t>(dead)] = true;
      if (j < total) {
        out.back_at = j;
        auto d = static_cast<std::size_t>(dead);
        ex[d] = bucket_exchanges(replicas, dead, wire_format::f32);
        step[d] = j, next[d] = 0, done[d] = 0;
        std::erase_if(links, [&](const auto& l) { return l.first.first == dead || l.first.second == dead; });
        out.sums[dead].clear();
        for (int r = 0; r < replicas; ++r)
          pending[static_cast<std::size_t>(r)] = r != dead;
      }
    }
    enum kind { compute, arrive, hear, rejoin };
    std::vector<std::pair<kind, int>> choices; // what may happen next, and to which replica or link
    for (int r = 0; r < replicas; ++r) {
      auto i = static_cast<std::size_t>(r);
      bool gated = pending[i] && step[i] == out.back_at && next[i] == 0; // not into step J before the word
      if (alive(r) && step[i] < total && (next[i] < buckets || done[i] == buckets) && !gated)
        choices.push_back({compute, r});
      if (out.died && alive(r) && !heard[i])
        choices.push_back({hear, r});
      if (pending[i])
        choices.push_back({rejoin, r});
    }
    std::vector<std::pair<int, int>> ready;
    for (auto& [k, q] : links)
      if (!q.empty() && alive(k.second)) {
        choices.push_back({arrive, static_cast<int>(ready.size())});
        ready.push_back(k);
      }
    if (choices.empty())
      break;
    auto [what, who] = choices[std::uniform_int_distribution<std::size_t>(0, choices.size() - 1)(rng)];
    if (what == compute) { // the next bucket, or the next step
      auto i = static_cast<std::size_t>(who);
      if (who == dead && !out.died && actions[i]++ == cut) {
        out.died = true;
        for (auto& [k, q] : links) // what it sent, in part, still arrives
          if (k.first == dead)
            q.resize(std::uniform_int_distribution<std::size_t>(0, q.size())(rng));
        continue;
      }
      if (next[i] < buckets) {
        post(who, ex[i].start(step[i], next[i], bucket_values(who, step[i], next[i])));
        ++next[i];
      } else {
        ++step[i], next[i] = 0, done[i] = 0;
      }
      collect(who);
    } else if (what == rejoin) { // a survivor hears that the lost replica is back from step J
      pending[static_cast<std::size_t>(who)] = false;
      ex[static_cast<std::size_t>(who)].rejoin(dead, out.back_at);
    } else if (what == hear) { // a survivor hears of the loss
      heard[static_cast<std::size_t>(who)] = true;
      post(who, ex[static_cast<std::size_t>(who)].lose(dead));
      collect(who);
    } else { // a link's first message arrives
      auto key = ready[static_cast<std::size_t>(who)];
      auto m = std::move(links[key].front());
      links[key].pop_front();
      auto& to = ex[static_cast<std::size_t>(key.second)];
      post(key.second, to.receive(m.step, m.bucket, key.first, m.send.round, m.send.piece, std::move(m.send.payload)));
      collect(key.second);
    }
  }
  for (int r = 0; r < replicas; ++r)
    if (alive(r))
      CHECK(step[static_cast<std::size_t>(r)] == total); // nobody waits for ever
  if (out.died && out.back_at < 0)
    out.sums.erase(dead); // what it had summed before: nobody applies it
  return out;
}

} // namespace

TEST_CASE("every replica gets each bucket's sum over the replicas, made in replica order") {
  auto run = simulate(3, -1, 0, 1);
  REQUIRE(run.sums.size() == 3);
  std::vector<int> everyone{0, 1, 2};
  for (const auto& [r, sums] : run.sums) {
    CHECK(sums.size() == static_cast<std::size_t>(steps * buckets));
    for (const auto& [k, v] : sums)
      CHECK(v == sum_of(everyone, k.first, k.second));
  }
  CHECK(run.most_held <= static_cast<std::size_t>(3 * buckets)); // old exchanges go
}

TEST_CASE("after a replica is lost at any point of a step, the replicas left apply the same sums, bit for bit") {
  const int replicas = 4;
  int with_share = 0, without = 0;
  for (unsigned seed = 0; seed < 300; ++seed) {
    int dead = static_cast<int>(seed % replicas), cut = static_cast<int>(seed / replicas) % (steps * (buckets + 1));
    auto run = simulate(replicas, dead, cut, seed);
    REQUIRE(run.died);
    std::vector<int> all{0, 1, 2, 3}, left;
    for (int r : all)
      if (r != dead)
        left.push_back(r);
    REQUIRE(run.sums.size() == left.size());
    const auto& first = run.sums.at(left.front());
    for (int r : left) {
      const auto& mine = run.sums.at(r);
      REQUIRE(mine.size() == static_cast<std::size_t>(steps * buckets));
      for (const auto& [k, v] : mine)
        CHECK(std::memcmp(v.data(), first.at(k).data(), v.size() * sizeof(float)) == 0);
    }
    // Each value holds the lost replica's share or not: the sum of all, or of those left.
    for (const auto& [k, v] : first) {
      auto full = sum_of(all, k.first, k.second), part = sum_of(left, k.first, k.second);
      for (std::size_t i = 0; i < values; ++i) {
        bool in = v[i] == full[i], out = v[i] == part[i];
        CHECK((in || out));
        with_share += in && !out && i == 0;
        without += out && !in && i == 0;
      }
    }
  }
  MESSAGE("first values with the lost share: ", with_share, ", without: ", without);
  CHECK(with_share > 0);
  CHECK(without > 0);
}

TEST_CASE("a lost replica that rejoins at step J gets the same sums as the others from J on, over all replicas") {
  const int replicas = 3, total = 8;
  int rejoined = 0;
  for (unsigned seed = 0; seed < 200; ++seed) {
    int dead = 1 + static_cast<int>(seed % 2), cut = static_cast<int>(seed / 2) % 12;
    auto run = simulate(replicas, dead, cut, seed, total, true);
    REQUIRE(run.died);
    if (run.back_at < 0)
      continue; // lost too late for a step J before the end
    ++rejoined;
    REQUIRE(run.sums.size() == 3);
    for (const auto& [r, mine] : run.sums)
      for (const auto& [k, v] : mine) {
        const auto& first = run.sums.at(0); // replica 0 is never the lost one here
        REQUIRE(first.count(k));
        CHECK(std::memcmp(v.data(), first.at(k).data(), v.size() * sizeof(float)) == 0);
        if (k.first >= run.back_at) // everyone's part again
          CHECK(v == sum_of({0, 1, 2}, k.first, k.second));
      }
    CHECK(run.sums.at(dead).size() == static_cast<std::size_t>((total - run.back_at) * buckets));
  }
  MESSAGE(rejoined, " of 200 runs rejoined");
  CHECK(rejoined > 100);
}
