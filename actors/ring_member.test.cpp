// The ring all-reduce of one bucket as its members run it (actors/ring_member.hpp):
// every member ends with the sum; with bf16 chunks, the same values on every member.
#include "actors/ring_member.hpp"

#include <cmath>
#include <cstring>
#include <random>

#include <doctest/doctest.h>

using namespace troupe;

namespace {

/// Runs one bucket of `values[m]` round a ring of values.size() members as
/// the actors do (ring_book's events over ring_flight's values), messages
/// delivered last sent first; returns each member's reduced values.
std::vector<std::vector<float>> ring_reduce(const std::vector<std::vector<float>>& values, bool bf16,
                                            std::int64_t* bytes_sent = nullptr) {
  const int members = static_cast<int>(values.size());
  std::vector<ring_flight> f(static_cast<std::size_t>(members));
  std::vector<ring_book> book;
  struct message {
    int to, phase;
    tensor_handle chunk;
  };
  std::vector<message> wire;
  int reduced = 0;
  auto run = [&](int m, std::vector<ring_book::event> events) {
    for (auto& e : events)
      if (e.what == ring_book::kind::send) {
        auto c = f[std::size_t(m)].chunk(e.phase, bf16);
        if (bytes_sent)
          *bytes_sent += static_cast<std::int64_t>(c.nbytes());
        wire.push_back({(m + 1) % members, e.phase, c});
      } else if (e.what == ring_book::kind::apply) {
        f[std::size_t(m)].apply(e.phase, e.chunk, "ring", 0, 0);
      } else {
        CHECK(e.what == ring_book::kind::reduced);
        ++reduced;
      }
  };
  for (int m = 0; m < members; ++m)
    book.emplace_back("r" + std::to_string(m), members, m, false);
  for (int m = 0; m < members; ++m) {
    auto t = tensor_handle::empty({static_cast<std::int64_t>(values[std::size_t(m)].size())});
    std::memcpy(t.raw(), values[std::size_t(m)].data(), t.nbytes());
    bucket_msg b;
    b.tensors.push_back(t);
    f[std::size_t(m)].take(std::move(b), members, m);
    run(m, book[std::size_t(m)].take({0, 0}, f[std::size_t(m)].plan.elements));
  }
  while (!wire.empty()) {
    auto msg = std::move(wire.back());
    wire.pop_back();
    run(msg.to, book[std::size_t(msg.to)].receive({0, 0}, msg.phase, std::move(msg.chunk)));
  }
  CHECK(reduced == members);
  std::vector<std::vector<float>> out;
  for (int m = 0; m < members; ++m) {
    std::vector<float> v(values[0].size());
    auto t = tensor_handle::empty({static_cast<std::int64_t>(v.size())});
    f[std::size_t(m)].write_back({t});
    std::memcpy(v.data(), t.raw(), t.nbytes());
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<std::vector<float>> random_values(int members, int n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d;
  std::vector<std::vector<float>> v(static_cast<std::size_t>(members), std::vector<float>(std::size_t(n)));
  for (auto& x : v)
    for (auto& y : x)
      y = d(rng);
  return v;
}

} // namespace

TEST_CASE("a ring of f32 chunks gives every member the sum") {
  auto v = random_values(4, 1001);
  auto out = ring_reduce(v, false);
  for (std::size_t i = 0; i < v[0].size(); ++i) {
    double sum = 0;
    for (const auto& x : v)
      sum += x[i];
    for (const auto& o : out)
      CHECK(std::abs(o[i] - sum) < 1e-5);
  }
}

TEST_CASE("a ring of bf16 chunks sends half the bytes and leaves every member the same sum to bf16 precision") {
  auto v = random_values(4, 1001);
  std::int64_t f32_bytes = 0, bf16_bytes = 0;
  ring_reduce(v, false, &f32_bytes);
  auto out = ring_reduce(v, true, &bf16_bytes);
  CHECK(bf16_bytes * 2 == f32_bytes);
  for (std::size_t i = 0; i < v[0].size(); ++i) {
    double sum = 0, scale = 0;
    for (const auto& x : v)
      sum += x[i], scale += std::abs(x[i]);
    for (const auto& o : out) {
      CHECK(std::isfinite(o[i]));
      CHECK(std::abs(o[i] - sum) <= 4 * 0x1p-8 * scale); // a rounding of 2^-9 relative per hop, 3 hops and the gather
      CHECK(std::memcmp(&o[i], &out[0][i], sizeof(float)) == 0);
    }
  }
}

TEST_CASE("a NaN in a bf16 ring stays a NaN") {
  auto v = random_values(2, 8);
  v[1][3] = std::nanf("");
  auto out = ring_reduce(v, true);
  CHECK(std::isnan(out[0][3]));
  CHECK(std::isnan(out[1][3]));
}
