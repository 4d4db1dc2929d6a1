// The tokenizer of a text data source (`corpus:` or `jsonl:`): bytes by default,
// or SentencePiece (Debian's libsentencepiece-dev) from `tokenizer: {model: FILE}`
// or trained once on the corpus, `tokenizer: {train: {vocab: N}}`, and cached.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
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
  /// The text of `ids` (each below vocab()).
  virtual std::string decode(std::span<const std::int32_t> ids) const = 0;
  /// Token `id`'s piece as the tokenizer spells it (`▁the`; a byte tokenizer's byte).
  virtual std::string piece(std::int32_t id) const = 0;
  /// The serialized SentencePiece model that sentencepiece_tokenizer() loads
  /// again; empty for bytes. A checkpoint keeps it so `troupe sample` reads and
  /// writes the run's text.
  virtual std::string model() const { return {}; }
};

/// Bytes as tokens (vocab 256): a byte-level run's tokenizer.
std::unique_ptr<tokenizer> byte_tokenizer();

/// The u8 tensor of the data loader's checkpoint part that holds the run's
/// SentencePiece model (tokenizer::model()), when it has one.
inline constexpr const char* tokenizer_tensor = "tokenizer.model";

/// A SentencePiece tokenizer from a serialized model (tokenizer::model(), or a
/// `.model` file's bytes). Throws std::runtime_error saying why it does not load.
std::unique_ptr<tokenizer> sentencepiece_tokenizer(std::string_view model);

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
