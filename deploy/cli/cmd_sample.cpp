// `troupe sample CHECKPOINT --prompt TEXT [--tokens N] [--temperature T]
// [--top-k K] [--seed S]`: a continuation of TEXT from a checkpoint's model.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/data/tokenizer.hpp"
#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "deploy/run/checkpoint_model.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe::cli {

namespace {

constexpr const char* sample_description =
  R"(Continues TEXT with the model of a checkpoint (a folder `--resume` takes: its
`latest`, or one step folder), one token at a time: each next token is drawn
from the model's distribution over the last `context` tokens, sharpened by
--temperature (0: always the likeliest token) and cut to the K likeliest with
--top-k (0: all). The same --seed draws the same text. The text is read and
written with the run's tokenizer: the SentencePiece model its checkpoint keeps
(a `tokenizer:` run), --tokenizer FILE.model (a token file's run), or bytes
(a byte-level model, vocab 256). Only the tokenizer's pieces are drawn.)";

constexpr const char* sample_footer = "Exit codes: 0 printed, 2 bad arguments or not a usable checkpoint.\n";

struct sample_cli {
  std::string checkpoint;
  std::string prompt;
  std::string tokenizer;
  int tokens = 200;
  double temperature = 0.8;
  int top_k = 0;
  std::uint64_t seed = 1;
  bool json = false;
};

/// The next token from `logits` (one position's, [vocab]).
int draw(const float* logits, int vocab, const sample_cli& a, std::mt19937_64& rng) {
  std::vector<int> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  // Likeliest first, lower ids first among equals, so the draw depends on the values only.
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return logits[x] > logits[y]; });
  if (a.temperature == 0)
    return order.front();
  std::size_t keep =
    a.top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(a.top_k), order.size()) : order.size();
  std::vector<double> weight(keep);
  double top = logits[order.front()], total = 0;
  for (std::size_t i = 0; i < keep; ++i)
    total += weight[i] = std::exp((logits[order[i]] - top) / a.temperature);
  double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
  for (std::size_t i = 0; i < keep; ++i)
    if ((u -= weight[i]) < 0)
      return order[i];
  return order[keep - 1];
}

/// The run's tokenizer: --tokenizer, else the checkpoint's, else bytes for a
/// byte-level model; nullptr after saying why there is none that fits.
std::unique_ptr<tokenizer> run_tokenizer(const sample_cli& a, const checkpoint_model& m) {
  try {
    std::unique_ptr<tokenizer> tok;
    if (!a.tokenizer.empty()) {
      std::ifstream in(a.tokenizer, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in.good() && !in.eof())
        throw std::runtime_error("cannot read it");
      tok = sentencepiece_tokenizer(bytes);
    } else if (!m.tokenizer_model.empty()) {
      tok = sentencepiece_tokenizer(m.tokenizer_model);
    } else if (m.config.vocab == 256) {
      tok = byte_tokenizer();
    } else {
      fmt::print(stderr,
                 "troupe sample: {}: the model's vocabulary has {} tokens and the checkpoint keeps no tokenizer "
                 "(a token file's run?): give its SentencePiece model with --tokenizer FILE.model\n",
                 m.from.folder.string(), m.config.vocab);
      return nullptr;
    }
    if (tok->vocab() > m.config.vocab) {
      fmt::print(stderr, "troupe sample: the tokenizer has {} pieces, more than the model's vocabulary of {}\n",
                 tok->vocab(), m.config.vocab);
      return nullptr;
    }
    return tok;
  } catch (const std::exception& e) {
    fmt::print(stderr, "troupe sample: {}{}\n", a.tokenizer.empty() ? "" : "--tokenizer " + a.tokenizer + ": ",
               e.what());
    return nullptr;
  }
}

int run_sample(const sample_cli& a) {
  if (a.prompt.empty()) {
    fmt::print(stderr, "troupe sample: --prompt: give at least one character to continue\n");
    return bad_input;
  }
  auto m = load_checkpoint_model(a.checkpoint);
  if (!m) {
    fmt::print(stderr, "troupe sample: {}\n", error_message(m.error()));
    return bad_input;
  }
  auto tok = run_tokenizer(a, *m);
  if (!tok)
    return bad_input;
  const auto& c = m->config;
  std::vector<std::int32_t> text;
  tok->encode(a.prompt, text);
  const auto prompt_tokens = text.size();
  std::mt19937_64 rng(a.seed);
  for (int n = 0; n < a.tokens; ++n) {
    auto from = text.size() > static_cast<std::size_t>(c.context) ? text.end() - c.context : text.begin();
    std::vector<std::int32_t> window(from, text.end());
    auto in = tensor_handle::empty({1, static_cast<std::int64_t>(window.size())}, dtype::i32);
    std::copy(window.begin(), window.end(), in.data<std::int32_t>());
    auto logits = m->logits(in);
    // Among the tokenizer's pieces only: a model's vocabulary may be larger (rounded up).
    text.push_back(
      draw(logits.data<float>() + (window.size() - 1) * static_cast<std::size_t>(c.vocab), tok->vocab(), a, rng));
  }
  std::span<const std::int32_t> added(text.begin() + static_cast<std::ptrdiff_t>(prompt_tokens), text.end());
  // Decoded whole, so a piece's joining space comes out as the tokenizer writes it.
  auto all = tok->decode(text), before = tok->decode({text.data(), prompt_tokens});
  auto continuation = all.starts_with(before) ? all.substr(before.size()) : tok->decode(added);
  if (a.json) {
    auto pieces = nlohmann::json::array();
    for (auto id : added)
      pieces.push_back(tok->piece(id));
    // The text may hold bytes that are not UTF-8; the tokens carry them exactly.
    fmt::print("{}\n", nlohmann::json{{"checkpoint", m->from.folder.string()},
                                      {"step", m->from.step},
                                      {"prompt", a.prompt},
                                      {"tokenizer",
                                       m->tokenizer_model.empty() && a.tokenizer.empty() ? "bytes" : "sentencepiece"},
                                      {"vocab", tok->vocab()},
                                      {"tokens", std::vector<std::int32_t>(added.begin(), added.end())},
                                      {"pieces", pieces},
                                      {"text", continuation}}
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    fmt::print("{}{}\n", a.prompt, continuation);
  }
  return ok;
}

} // namespace

command_action define_sample(CLI::App& app) {
  auto a = std::make_shared<sample_cli>();
  describe(app, sample_description, sample_footer);
  app.add_option("CHECKPOINT", a->checkpoint, "a checkpoint folder (its `latest`) or one step folder")->required();
  app.add_option("--prompt", a->prompt, "the text to continue")->required();
  app.add_option("--tokenizer", a->tokenizer,
                 "a SentencePiece model (.model) to read and write the text with (default: the run's)");
  add_count(app, "--tokens", a->tokens, 0, 1 << 20, "tokens to add (default 200)");
  add_number(app, "--temperature", a->temperature, 0, 100, false,
             "divides the logits; 0 takes the likeliest (default 0.8)");
  add_count(app, "--top-k", a->top_k, 0, 1 << 30, "draw among the K likeliest tokens; 0: all (default 0)");
  add_count(app, "--seed", a->seed, 0, std::numeric_limits<std::int64_t>::max(), "the draws' seed (default 1)");
  app.add_flag("--json", a->json, "print the continuation as one JSON object");
  return [a] { return run_sample(*a); };
}

} // namespace troupe::cli
