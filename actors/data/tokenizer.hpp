// The tokenizer of a text data source (`corpus:` or `jsonl:`): bytes by default,
// or SentencePiece (Debian's libsentencepiece-dev) from `tokenizer: {model: FILE}`
// or trained once on the corpus, `tokenizer: {train: {vocab: N}}`, and cached.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/actor/errors.hpp"
#include "runtime/graph/option_spec.hpp"

namespace troupe {

struct graph_spec;

/// Text to token ids.
class tokenizer {
public:
  virtual ~tokenizer() = default;
  /// Token ids run from 0 to vocab() - 1.
  virtual int vocab() const = 0;
  /// Appends the ids of `text` to `out`.
  virtual void encode(std::string_view text, std::vector<std::int32_t>& out) const = 0;
};

/// The `tokenizer.*` keys a text source registers: model, train.vocab, train.type, cache.
std::vector<option_spec> tokenizer_options();

/// The graph's tokenizer is not the byte one.
bool uses_sentencepiece(const graph_spec& g);

/// Checks the `tokenizer:` settings: one of model and train, a model that loads,
/// a vocabulary that fits model.vocab (bytes: 256). Reports at the keys.
void check_tokenizer(const graph_spec& g, diagnostics& out);

/// Calls `visit` on each piece of text a tokenizer is trained on.
using text_pieces = std::function<void(const std::function<void(std::string_view)>& visit)>;

/// The graph's tokenizer: bytes, the model file, or the model trained on `pieces`
/// (the corpus), cached beside the corpus (or in tokenizer.cache) under the hash
/// of the corpus's bytes and the training settings, reused when present.
/// Throws std::runtime_error naming the file on failure.
std::unique_ptr<tokenizer> make_tokenizer(const graph_spec& g, const text_pieces& pieces);

/// Where make_tokenizer caches a model trained for `g` (the hash of the corpus and settings).
std::filesystem::path trained_model_path(const graph_spec& g);

} // namespace troupe
