// SentencePiece through a text source: a model trained on the corpus is the
// same every time, cached under the corpus's hash and reused, and a model that
// does not load or does not fit model.vocab is refused at its key.
#include <fstream>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "actors/data/token_corpus.hpp"
#include "actors/data/tokenizer.hpp"
#include "tests/data_graph.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

/// Some word-like text: words of two or three syllables drawn by a xorshift, in
/// lines, with a chapter header every 40 lines.
void write_text(const fs::path& p, int lines) {
  const char* syllables[] = {"ba", "ke", "lo", "mi", "nu", "ra",  "se",  "ti",  "vo",  "wu",
                             "an", "el", "is", "on", "ur", "sha", "tho", "gri", "pla", "dre"};
  std::ofstream out(p);
  std::uint64_t x = 88172645463325252ull;
  auto next = [&] { return x ^= x << 13, x ^= x >> 7, x ^= x << 17, x; };
  for (int l = 0; l < lines; ++l) {
    for (int w = 0; w < 12; ++w) {
      for (auto n = 2 + next() % 2; n > 0; --n)
        out << syllables[next() % std::size(syllables)];
      out << (w == 11 ? ".\n" : " ");
    }
    if (l % 40 == 39)
      out << "\nChapter " << l / 40 + 2 << "\n";
  }
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

} // namespace

TEST_CASE("a tokenizer trained on the corpus is deterministic, cached by the corpus's hash and reused") {
  testing::scratch_dir d{"tokenizer"};
  write_text(d.path / "corpus.txt", 400);
  fs::create_directories(d.path / "one"), fs::create_directories(d.path / "two");
  auto graph = [&](const std::string& cache, int vocab) {
    auto r = testing::load_data_graph(
      fmt::format("{{corpus: corpus.txt, tokenizer: {{train: {{vocab: {}}}, cache: {}}}, batch: 2}}", vocab, cache),
      d.path);
    INFO(to_string(r.errors));
    REQUIRE(r.ok());
    return *r.graph;
  };
  auto g1 = graph("one", 120), g2 = graph("two", 120);
  auto a = open_data_source(g1), b = open_data_source(g2);
  auto m1 = trained_model_path(g1), m2 = trained_model_path(g2);
  REQUIRE(fs::is_regular_file(m1));
  REQUIRE(fs::is_regular_file(m2));
  CHECK(slurp(m1) == slurp(m2)); // trained twice, byte for byte the same model
  CHECK(m1.parent_path() == d.path / "one");
  REQUIRE(a.train->size() == b.train->size());
  CHECK(a.train->size() < fs::file_size(d.path / "corpus.txt") / 2); // pieces, not bytes
  std::vector<std::int32_t> ta(a.train->size()), tb(b.train->size());
  a.train->copy(0, ta.size(), ta.data());
  b.train->copy(0, tb.size(), tb.data());
  CHECK(ta == tb);
  CHECK(*std::max_element(ta.begin(), ta.end()) < 120);
  // A second run reads the cache: put another model (of 200 pieces) there and it is the one used.
  auto g3 = graph("two", 200);
  open_data_source(g3);
  fs::copy_file(trained_model_path(g3), m1, fs::copy_options::overwrite_existing);
  auto again = open_data_source(g1);
  CHECK(again.train->size() != a.train->size());
  // Another corpus, another hash: the cache does not serve it.
  write_text(d.path / "corpus.txt", 401);
  CHECK(trained_model_path(graph("one", 120)) != m1);
  // Chapters are documents of the tokenized text too.
  token_corpus c(open_data_source(g2), 16, 0.1, 1);
  c.set_documents(document_source::chapters);
  CHECK(c.document_starts().size() == 11); // the first chapter and 10 headed ones
}

TEST_CASE("a tokenizer model that does not load or does not fit model.vocab is refused at its key") {
  testing::scratch_dir d{"tokenizer"};
  write_text(d.path / "corpus.txt", 400);
  std::ofstream(d.path / "junk.model") << "not a model";
  auto trained =
    testing::load_data_graph("{corpus: corpus.txt, tokenizer: {train: {vocab: 250}, cache: .}, batch: 2}", d.path);
  REQUIRE(trained.ok());
  open_data_source(*trained.graph);
  fs::copy_file(trained_model_path(*trained.graph), d.path / "good.model");
  struct bad_case {
    std::string data, key, message;
    int vocab;
  };
  for (const auto& c : std::vector<bad_case>{
         {"{corpus: corpus.txt, tokenizer: {model: junk.model}, batch: 2}", "data.tokenizer.model",
          "tokenizer model '" + (d.path / "junk.model").string() + "' does not load", 300},
         {"{corpus: corpus.txt, tokenizer: {model: none.model}, batch: 2}", "data.tokenizer.model", "no such file",
          300},
         {"{corpus: corpus.txt, tokenizer: {model: good.model}, batch: 2}", "data.tokenizer.model",
          "has 250 pieces, more than model.vocab 200", 200},
         {"{corpus: corpus.txt, tokenizer: {train: {vocab: 500}}, batch: 2}", "data.tokenizer.train.vocab",
          "a tokenizer of 500 pieces does not fit model.vocab 300", 300},
         {"{corpus: corpus.txt, tokenizer: {modle: good.model}, batch: 2}", "data.tokenizer.modle",
          "unknown key 'modle' (did you mean 'model'? known: model, train, cache)", 300},
         {"{corpus: corpus.txt, batch: 2}", "model.vocab", "vocab 200 is too small for the byte-level corpus", 200},
       }) {
    CAPTURE(c.data);
    auto r = testing::load_data_graph(c.data, d.path, c.vocab);
    REQUIRE(r.errors.size() == 1);
    CHECK(r.errors[0].path == c.key);
    CHECK_MESSAGE(r.errors[0].message.find(c.message) != std::string::npos, r.errors[0].message);
  }
}
