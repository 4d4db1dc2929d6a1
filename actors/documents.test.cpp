// Documents in the corpus: the KJV's chapters, the long-tail law's shape, and
// window masks against a brute-force reading of the boundaries.
#include "actors/documents.hpp"

#include <algorithm>
#include <numeric>
#include <fstream>
#include <random>

#include <doctest/doctest.h>

#include "actors/data/token_corpus.hpp"
#include "kernels/cpu/attention.hpp"
#include "runtime/graph/graph_loader.hpp"

using namespace troupe;

TEST_CASE("the KJV's documents are its 1189 chapters, each starting at its header line") {
  token_corpus c(default_corpus_path(), 64, 0.1, 1);
  c.set_documents(document_source::chapters);
  const auto& starts = c.document_starts();
  CHECK(starts.size() == 1189);
  CHECK(std::is_sorted(starts.begin(), starts.end()));
  std::ifstream in(default_corpus_path(), std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.substr(0, 10) == "\nGenesis 1"); // the first chapter, from byte 0
  for (auto s : {starts[1], starts[150], starts.back()}) {
    CAPTURE(s);
    CHECK(text.substr(s - 2, 2) == "\n\n");
    auto line = text.substr(s, text.find('\n', s) - s);
    CHECK(std::isdigit(static_cast<unsigned char>(line.back()))); // "Genesis 2", "Psalms 117", ...
  }
}

TEST_CASE("long-tail documents: most short, a few percent holding a large share of the tokens") {
  const int context = 256;
  const std::size_t total = 4'000'000;
  auto lengths = document_lengths_long_tail(total, context, 7);
  CHECK(std::accumulate(lengths.begin(), lengths.end(), std::size_t{0}) == total);
  CHECK(*std::max_element(lengths.begin(), lengths.end()) <= std::size_t(8 * context));
  auto sorted = lengths;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  auto top = sorted.size() / 20; // the longest 5%
  double share =
    double(std::accumulate(sorted.begin(), sorted.begin() + std::ptrdiff_t(top), std::size_t{0})) / double(total);
  auto longer_than_window =
    std::count_if(lengths.begin(), lengths.end(), [&](auto n) { return n > std::size_t(context); });
  INFO("documents " << lengths.size() << ", median " << sorted[sorted.size() / 2] << ", top 5% share " << share
                    << ", longer than a window " << longer_than_window);
  CHECK(sorted[sorted.size() / 2] <= std::size_t(context / 4)); // most are short
  CHECK(share >= 0.35);                                         // the long few hold a large share
  CHECK(longer_than_window >= std::ptrdiff_t(lengths.size() / 100));
  CHECK(longer_than_window <= std::ptrdiff_t(lengths.size() / 10));
  // Another seed, another draw.
  CHECK(document_lengths_long_tail(total, context, 8) != lengths);
}

TEST_CASE("a window's mask gives each token the start of its document, as the boundaries say") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::size_t> lengths;
    for (std::size_t at = 0; at < 2000; at += lengths.back())
      lengths.push_back(1 + rng() % 40);
    auto starts = starts_of(lengths);
    std::size_t begin = rng() % 1500;
    int n = 1 + int(rng() % 300);
    std::vector<std::int32_t> mask(std::size_t(n), -1);
    window_documents(starts, begin, n, mask.data());
    CHECK(kernels::cpu::documents_well_formed(mask.data(), 1, n));
    for (int t = 0; t < n; ++t) {
      std::size_t doc = 0; // brute force: the last start at or before the token
      for (auto s : starts)
        if (s <= begin + std::size_t(t))
          doc = s;
      CHECK(mask[std::size_t(t)] == std::int32_t(std::max(doc, begin) - begin));
    }
  }
}

TEST_CASE("batches carry document masks only when the corpus has documents") {
  token_corpus c(default_corpus_path(), 128, 0.1, 5);
  token_batch b;
  c.next_train(4, b);
  CHECK_FALSE(b.documents.defined());
  for (auto source : {document_source::chapters, document_source::long_tail}) {
    CAPTURE(to_string(source));
    c.set_documents(source);
    c.seek(0);
    int boundaries = 0;
    for (int k = 0; k < 20; ++k) {
      c.next_train(8, b);
      REQUIRE(b.documents.defined());
      const auto* d = b.documents.data<std::int32_t>();
      CHECK(kernels::cpu::documents_well_formed(d, 8, 128));
      for (int i = 0; i < 8 * 128; ++i)
        boundaries += i % 128 != 0 && d[i] == i % 128;
    }
    token_batch v;
    c.validation(0, 4, v);
    CHECK(v.documents.defined());
    CHECK(boundaries > 0);
  }
  CHECK(parse_document_source("long_tail") == document_source::long_tail);
  CHECK_FALSE(parse_document_source("books"));
}
