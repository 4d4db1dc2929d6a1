// A data source's tokens cut into fixed-length windows: a training split
// shuffled per epoch by seed, and a held-out validation split read in a fixed order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "actors/data/token_source.hpp"
#include "actors/documents.hpp"
#include "runtime/tensor/tensor_handle.hpp"

namespace troupe {

/// Tokens and next-token targets for one microbatch, both i32 [batch, context],
/// and with documents their mask: i32 [batch, context], each token's position of
/// its document's first token (actors/documents.hpp); undefined without documents.
struct token_batch {
  tensor_handle tokens;
  tensor_handle targets;
  tensor_handle documents;
};

/// The windows of a source's streams. Sequence `i` of an epoch is window
/// `perm[i]`; the position is a single counter, so a checkpoint stores one number.
class token_corpus {
public:
  /// Windows of `context` + 1 tokens over `source`: the last `val_fraction` of its
  /// training stream is held out, unless it has a validation stream of its own.
  /// Throws std::runtime_error when a split is too short for even one window.
  token_corpus(opened_source source, int context, double val_fraction, std::uint64_t seed);
  /// The text file at `path` read as bytes (the `corpus:` source without a tokenizer).
  token_corpus(const std::filesystem::path& path, int context, double val_fraction, std::uint64_t seed);

  /// Cuts the streams into documents from `source` (long_tail draws from the
  /// corpus's seed); batches then carry their masks. The default is none.
  void set_documents(document_source source);
  document_source documents() const noexcept { return documents_; }
  /// Where each document of the training stream starts (offsets, ascending).
  const std::vector<std::size_t>& document_starts() const noexcept { return starts_; }

  /// Fills the next `batch` training sequences into `out` (allocated on first use).
  void next_train(int batch, token_batch& out);

  /// Validation batch `k` (of any number): fixed windows, the same every call.
  void validation(int k, int batch, token_batch& out) const;

  /// Training sequences handed out so far; set it to resume.
  std::uint64_t position() const noexcept { return position_; }
  void seek(std::uint64_t position);

  std::size_t train_windows() const noexcept { return train_windows_; }
  std::size_t val_windows() const noexcept { return val_windows_; }
  /// Tokens of the training stream (both splits when validation is its tail).
  std::size_t tokens() const noexcept { return source_.train->size(); }
  /// The SentencePiece model that made the tokens (serialized); empty: bytes or a token file.
  const std::string& tokenizer_model() const noexcept { return source_.tokenizer_model; }

private:
  void shuffle_epoch(std::uint64_t epoch);
  void copy_window(const token_stream& stream, const std::vector<std::size_t>& starts, std::size_t start,
                   token_batch& out, int row) const;
  const token_stream& val_stream() const { return source_.validation ? *source_.validation : *source_.train; }

  opened_source source_;
  int context_;
  std::uint64_t seed_;
  std::size_t train_tokens_; ///< the training split: the first tokens of the training stream
  std::size_t val_begin_;    ///< where the validation split starts in val_stream()
  std::size_t train_windows_;
  std::size_t val_windows_;
  std::uint64_t position_ = 0;
  std::uint64_t epoch_ = ~std::uint64_t{0};
  std::vector<std::uint32_t> perm_;
  document_source documents_ = document_source::none;
  std::vector<std::size_t> starts_;     ///< of the training stream
  std::vector<std::size_t> val_starts_; ///< of a separate validation stream
};

} // namespace troupe
