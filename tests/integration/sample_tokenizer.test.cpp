// `troupe sample` with the run's tokenizer: a run that trained a SentencePiece
// model keeps it in its checkpoint, and sample encodes the prompt and decodes
// the continuation with it, drawing only the tokenizer's pieces from a model
// whose vocabulary is larger; the same seed gives the same text.
#include <algorithm>
#include <fstream>

#include "actors/data/tokenizer.hpp"
#include "deploy/run/checkpoint_model.hpp"
#include "tests/integration/troupe_process.hpp"

using namespace troupe::testing;

TEST_CASE("troupe sample reads and writes a SentencePiece run's text with its tokenizer") {
  auto dir = fs::temp_directory_path() / ("troupe_sample_sp_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream text(dir / "corpus.txt");
    const char* verse[] = {"in the beginning was the word", "and the word was with god", "and the light shineth",
                           "the darkness comprehended it not", "there was a man sent from god"};
    for (int i = 0; i < 3000; ++i)
      text << verse[(i * 7 + i / 5) % 5] << (i % 3 == 2 ? ".\n" : ", ");
  }
  std::ofstream{dir / "graph.yaml"} << "model: {layers: 2, d_model: 32, heads: 2, context: 16, vocab: 300}\n"
                                       "data: {corpus: corpus.txt, tokenizer: {train: {vocab: 80}}, batch: 4}\n"
                                       "train: {steps: 6, lr: 1.0e-2, eval_batches: 1}\n"
                                       "checkpoint: {dir: ckpt, every: 6}\n";
  REQUIRE(run_to_end(dir, {"run", (dir / "graph.yaml").string(), "--no-trace"}) == 0);
  auto run_out = slurp(dir / "out.txt"); // a loss per SentencePiece id, not per byte of text
  CHECK(run_out.find("bits/token)") != std::string::npos);
  CHECK(run_out.find("bits/byte") == std::string::npos);
  auto ck = (dir / "ckpt").string();
  auto sample = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"sample", ck, "--prompt", "and the word", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    REQUIRE(run_to_end(dir, args) == 0);
    return nlohmann::json::parse(slurp(dir / "out.txt"));
  };

  auto m = troupe::load_checkpoint_model(ck);
  REQUIRE(m);
  REQUIRE(!m->tokenizer_model.empty()); // the loader's part keeps it
  auto tok = troupe::sentencepiece_tokenizer(m->tokenizer_model);
  REQUIRE(tok->vocab() == 80);

  SUBCASE("temperature 0 continues the prompt's SentencePiece tokens with the likeliest piece") {
    auto greedy = sample({"--tokens", "1", "--temperature", "0"});
    CHECK(greedy["tokenizer"] == "sentencepiece");
    std::vector<std::int32_t> ids;
    tok->encode("and the word", ids);
    auto in = troupe::tensor_handle::empty({1, static_cast<std::int64_t>(ids.size())}, troupe::dtype::i32);
    std::copy(ids.begin(), ids.end(), in.data<std::int32_t>());
    auto logits = m->logits(in);
    const float* last = logits.data<float>() + (ids.size() - 1) * 300;
    CHECK(greedy["tokens"][0] == std::max_element(last, last + 80) - last);
  }
  SUBCASE("a seed draws the same text of valid pieces, and the text is their decoding") {
    auto a = sample({"--tokens", "40", "--seed", "3", "--temperature", "1.5"});
    CHECK(a == sample({"--tokens", "40", "--seed", "3", "--temperature", "1.5"}));
    CHECK(a["tokens"] != sample({"--tokens", "40", "--seed", "4", "--temperature", "1.5"})["tokens"]);
    std::vector<std::int32_t> ids = a["tokens"];
    REQUIRE(ids.size() == 40);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      CHECK(ids[i] >= 0);
      CHECK(ids[i] < 80); // never one of the model's 220 ids that no piece has
      CHECK(a["pieces"][i] == tok->piece(ids[i]));
    }
    std::vector<std::int32_t> all;
    tok->encode("and the word", all);
    all.insert(all.end(), ids.begin(), ids.end());
    CHECK(a["text"].get<std::string>().size() > 10);
    CHECK(tok->decode(all) == "and the word" + a["text"].get<std::string>());
  }
  SUBCASE("a tokenizer that does not load is exit 2 naming it") {
    std::ofstream(dir / "not.model") << "not a model";
    CHECK(run_to_end(dir, {"sample", ck, "--prompt", "x", "--tokenizer", (dir / "not.model").string()}) == 2);
    CHECK(slurp(dir / "err.txt").find("--tokenizer " + (dir / "not.model").string() + ": ") != std::string::npos);
  }
  fs::remove_all(dir);
}
