// Each data source kind trains and resumes exactly: a token file over two
// replicas, JSON lines, and a text with a SentencePiece tokenizer trained on it
// run a few steps, and a run resumed from its middle checkpoint gives the
// uninterrupted run's losses to 1e-6.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/run_text.hpp"
#include "tests/data_graph.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

/// Words from a xorshift, so every kind has text with some structure to learn.
std::string some_text(int lines, std::uint64_t seed) {
  const char* words[] = {"the", "lord", "said", "unto", "moses", "and", "aaron", "in", "land", "of", "egypt"};
  std::string out;
  std::uint64_t x = 88172645463325252ull + seed;
  for (int l = 0; l < lines; ++l)
    for (int w = 0; w < 10; ++w) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      out += words[x % std::size(words)];
      out += w == 9 ? ".\n" : " ";
    }
  return out;
}

run_result run(const std::string& graph, const fs::path& dir, const std::string& name, int resume_step = 0,
               const fs::path& from = {}) {
  auto g = testing::load_graph_or_fail(graph, (dir / name).string());
  if (resume_step > 0)
    g.checkpoint.resume_folder = from / fmt::format("step-{:06d}", resume_step), g.checkpoint.resume_step = resume_step;
  return testing::run_graph_or_fail(g);
}

/// Four steps with a checkpoint every two, then steps 3 and 4 again from the step-2 checkpoint.
void trains_and_resumes(const std::string& data, const fs::path& dir, const std::string& extra = "") {
  auto graph = [&](const std::string& ckpt) {
    return fmt::format("model: {{layers: 2, d_model: 32, heads: 2, context: 32, vocab: 300}}\n"
                       "data: {}\n"
                       "train: {{steps: 4, lr: 3.0e-3, eval_batches: 1}}\n"
                       "checkpoint: {{dir: {}, every: 2}}\n{}",
                       data, ckpt, extra);
  };
  auto full = run(graph("full"), dir, "full.yaml");
  REQUIRE(full.losses.size() == 4);
  for (double l : full.losses)
    CHECK(std::isfinite(l));
  CHECK(full.losses[3] < full.losses[0]); // it learns
  auto resumed = run(graph("resumed"), dir, "resumed.yaml", 2, dir / "full");
  REQUIRE(resumed.losses.size() == 2);
  CHECK(std::abs(resumed.losses[0] - full.losses[2]) <= 1e-6);
  CHECK(std::abs(resumed.losses[1] - full.losses[3]) <= 1e-6);
}

} // namespace

TEST_CASE("a token file trains over two replicas and two stages, and resumes exactly") {
  testing::scratch_dir d{"data_sources"};
  auto text = some_text(600, 1);
  {
    std::ofstream out(d.path / "train.bin", std::ios::binary);
    for (unsigned char c : text) { // bytes as uint16 ids, an end-of-text id after each line
      std::uint16_t v = c;
      out.write(reinterpret_cast<const char*>(&v), 2);
      if (c == '\n')
        v = 299, out.write(reinterpret_cast<const char*>(&v), 2);
    }
  }
  trains_and_resumes("{tokens: train.bin, dtype: uint16, vocab: 300, eot: 299, documents: eot, batch: 2, seed: 3}",
                     d.path, "pipeline: {stages: 2, microbatches: 2}\ndata_parallel: {replicas: 2}\n");
}

TEST_CASE("JSON lines train and resume exactly") {
  testing::scratch_dir d{"data_sources"};
  {
    std::ofstream out(d.path / "records.jsonl");
    for (int i = 0; i < 200; ++i) {
      auto text = some_text(2, static_cast<std::uint64_t>(i));
      std::replace(text.begin(), text.end(), '\n', ' '); // a JSON string holds no raw line end
      out << fmt::format("{{\"id\": {}, \"text\": \"{}\"}}\n", i, text);
    }
  }
  trains_and_resumes("{jsonl: records.jsonl, field: text, documents: eot, batch: 4}", d.path);
}

TEST_CASE("a text with a SentencePiece tokenizer trained on it trains and resumes exactly") {
  testing::scratch_dir d{"data_sources"};
  std::ofstream(d.path / "corpus.txt") << some_text(1500, 7);
  trains_and_resumes("{corpus: corpus.txt, tokenizer: {train: {vocab: 80}}, batch: 4}", d.path);
}
