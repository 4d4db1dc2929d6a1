// The byte corpus: deterministic shuffling, a fixed validation split, resumable position.
#include "actors/data/token_corpus.hpp"

#include <cstdio>
#include <fstream>
#include <set>

#include <doctest/doctest.h>

using namespace troupe;

namespace {

std::filesystem::path write_corpus(std::size_t n) {
  auto p = std::filesystem::temp_directory_path() / ("troupe_corpus_" + std::to_string(n) + ".txt");
  std::ofstream out(p, std::ios::binary);
  std::uint64_t x = 88172645463325252ull; // xorshift: 10-letter windows are all distinct
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    out.put(static_cast<char>('a' + x % 26));
  }
  return p;
}

std::vector<int> flat(const tensor_handle& h) {
  return {h.data<std::int32_t>(), h.data<std::int32_t>() + h.numel()};
}

} // namespace

TEST_CASE("targets are the tokens shifted by one byte") {
  token_corpus c(write_corpus(5000), 16, 0.1, 1);
  token_batch b;
  c.next_train(4, b);
  for (int s = 0; s < 4; ++s)
    for (int t = 0; t + 1 < 16; ++t)
      CHECK(b.targets.data<std::int32_t>()[s * 16 + t] == b.tokens.data<std::int32_t>()[s * 16 + t + 1]);
}

TEST_CASE("the same seed gives the same batches and another seed different ones") {
  auto path = write_corpus(20000);
  token_corpus a(path, 32, 0.1, 7), b(path, 32, 0.1, 7), c(path, 32, 0.1, 8);
  token_batch x, y, z;
  a.next_train(8, x);
  b.next_train(8, y);
  c.next_train(8, z);
  CHECK(flat(x.tokens) == flat(y.tokens));
  CHECK(flat(x.tokens) != flat(z.tokens));
}

TEST_CASE("an epoch visits every training window exactly once") {
  token_corpus c(write_corpus(3000), 10, 0.2, 3);
  std::set<std::vector<int>> seen;
  token_batch b;
  for (std::size_t i = 0; i < c.train_windows(); ++i) {
    c.next_train(1, b);
    seen.insert(flat(b.tokens));
  }
  CHECK(c.position() == c.train_windows());
  CHECK(seen.size() == c.train_windows());
}

TEST_CASE("seeking to a position resumes the exact stream") {
  auto path = write_corpus(8000);
  token_corpus a(path, 16, 0.1, 5), b(path, 16, 0.1, 5);
  token_batch x, y;
  for (int i = 0; i < 30; ++i)
    a.next_train(6, x);
  b.seek(a.position());
  a.next_train(6, x);
  b.next_train(6, y);
  CHECK(flat(x.tokens) == flat(y.tokens));
}

TEST_CASE("validation batches come from the held-out tail and never change") {
  auto path = write_corpus(10000);
  token_corpus c(path, 16, 0.1, 5);
  token_batch v1, v2, t;
  c.validation(2, 4, v1);
  for (int i = 0; i < 10; ++i)
    c.next_train(4, t);
  c.validation(2, 4, v2);
  CHECK(flat(v1.tokens) == flat(v2.tokens));
}

TEST_CASE("a missing or too-short corpus is an error naming the file") {
  CHECK_THROWS_WITH_AS(token_corpus("/nonexistent/kjv.txt", 64, 0.1, 1), doctest::Contains("/nonexistent/kjv.txt"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(token_corpus(write_corpus(50), 64, 0.1, 1), doctest::Contains("too short"), std::runtime_error);
}

TEST_CASE("a saved position resumes the stream across epoch boundaries and validation does not move it") {
  auto path = write_corpus(3000);
  token_corpus a(path, 16, 0.1, 9);
  token_batch x, y, v;
  auto windows = a.train_windows();
  while (a.position() < 2 * windows + windows / 2) { // into the third epoch
    a.next_train(7, x);
    a.validation(3, 4, v); // evaluation between steps reads the tail only
  }
  auto saved = a.position();
  a.validation(0, 8, v);
  CHECK(a.position() == saved);
  token_corpus b(path, 16, 0.1, 9); // a fresh process: no epoch shuffled yet
  b.seek(saved);
  for (std::size_t i = 0; i < windows / 7 + 2; ++i) { // past the next epoch boundary
    a.next_train(7, x);
    b.next_train(7, y);
    REQUIRE(flat(x.tokens) == flat(y.tokens));
    REQUIRE(flat(x.targets) == flat(y.targets));
  }
  CHECK(a.position() / windows == 3);
}
