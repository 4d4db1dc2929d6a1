// The ring all-reduce's arithmetic: run by hand over plain vectors, every member
// ends with the sum, and each sends exactly 2(n-1)/n of the bucket.
#include "schedulers/sync/ring_allreduce.hpp"

#include <doctest/doctest.h>

using namespace troupe::sched;

TEST_CASE("a ring of n members leaves every member the sum and sends 2(n-1)/n of the padded bucket each") {
  for (int n : {2, 3, 4, 5}) {
    for (std::int64_t elements : {1, 7, 64, 1001}) {
      CAPTURE(n);
      CAPTURE(elements);
      std::vector<ring_plan> plans;
      std::vector<std::vector<double>> buf;
      for (int r = 0; r < n; ++r) {
        plans.push_back({n, r, elements});
        std::vector<double> b(static_cast<std::size_t>(plans.back().padded()), 0.0);
        for (std::int64_t i = 0; i < elements; ++i)
          b[static_cast<std::size_t>(i)] = static_cast<double>((r + 1) * 1000 + i);
        buf.push_back(b);
      }
      auto ce = plans[0].chunk_elements();
      std::vector<std::int64_t> sent(static_cast<std::size_t>(n), 0);
      // Lockstep: in phase k every member sends send_chunk(k) and its successor takes it as recv_chunk(k).
      for (int k = 0; k < plans[0].phases(); ++k) {
        std::vector<std::vector<double>> wire(static_cast<std::size_t>(n));
        for (int r = 0; r < n; ++r) {
          auto c = plans[static_cast<std::size_t>(r)].send_chunk(k);
          auto& b = buf[static_cast<std::size_t>(r)];
          wire[static_cast<std::size_t>(r)].assign(b.begin() + c * ce, b.begin() + (c + 1) * ce);
          sent[static_cast<std::size_t>(r)] += ce;
        }
        for (int r = 0; r < n; ++r) {
          int from = (r + n - 1) % n;
          const auto& p = plans[static_cast<std::size_t>(r)];
          auto c = p.recv_chunk(k);
          CHECK(c == plans[static_cast<std::size_t>(from)].send_chunk(k));
          if (k + 1 < p.phases())
            CHECK(p.send_chunk(k + 1) == c); // the next send is what just came in
          for (std::int64_t i = 0; i < ce; ++i) {
            auto& x = buf[static_cast<std::size_t>(r)][static_cast<std::size_t>(c * ce + i)];
            x = p.adds(k) ? x + wire[static_cast<std::size_t>(from)][static_cast<std::size_t>(i)]
                          : wire[static_cast<std::size_t>(from)][static_cast<std::size_t>(i)];
          }
        }
      }
      for (int r = 0; r < n; ++r) {
        for (std::int64_t i = 0; i < elements; ++i) {
          double want = 0;
          for (int q = 0; q < n; ++q)
            want += (q + 1) * 1000 + i;
          CHECK(buf[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] == want);
        }
        CHECK(sent[static_cast<std::size_t>(r)] * n == 2 * (n - 1) * plans[0].padded());
      }
    }
  }
}

TEST_CASE("buckets follow backward's order and close once they reach the bucket size") {
  // chunk 0: sizes 10 20 30; chunk 1: 40 50
  std::vector<std::vector<std::int64_t>> bytes{{10, 20, 30}, {40, 50}};
  auto b = make_buckets(bytes, 60);
  REQUIRE(b.size() == 2);
  CHECK(b[0] == std::vector<param_ref>{{1, 1}, {1, 0}});         // 90 bytes: closes at the first param past 60
  CHECK(b[1] == std::vector<param_ref>{{0, 2}, {0, 1}, {0, 0}}); // 60
  auto one = make_buckets(bytes, 1 << 30);
  REQUIRE(one.size() == 1);
  CHECK(one[0].size() == 5);
}

TEST_CASE("parameters cut alone (a tied matrix's copies) go each in a bucket of their own, after the others") {
  std::vector<std::vector<std::int64_t>> bytes{{10, 20, 30}, {40, 50}};
  auto b = make_buckets(bytes, 60, {{0, 0}, {1, 1}});
  REQUIRE(b.size() == 4);
  CHECK(b[0] == std::vector<param_ref>{{1, 0}, {0, 2}}); // 70: the others close as before, without the two
  CHECK(b[1] == std::vector<param_ref>{{0, 1}});
  CHECK(b[2] == std::vector<param_ref>{{0, 0}});
  CHECK(b[3] == std::vector<param_ref>{{1, 1}});
}
