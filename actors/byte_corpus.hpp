// A byte-level corpus cut into fixed-length windows: a training split shuffled
// per epoch by seed, and a held-out validation split read in a fixed order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

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

/// The corpus as bytes (vocabulary 256). Sequence `i` of an epoch is window
/// `perm[i]`; the position is a single counter, so a checkpoint stores one number.
class byte_corpus {
public:
  /// Reads `path`; the last `val_fraction` of the bytes is held out.
  /// Throws std::runtime_error naming the file when it is missing, unreadable
  /// or too short for even one training and one validation window.
  byte_corpus(const std::filesystem::path& path, int context, double val_fraction, std::uint64_t seed);

  /// Cuts the corpus into documents from `source` (long_tail draws from the
  /// corpus's seed); batches then carry their masks. The default is none.
  void set_documents(document_source source);
  document_source documents() const noexcept { return documents_; }
  /// Where each document starts (offsets into the corpus, ascending).
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
  std::size_t bytes() const noexcept { return bytes_.size(); }

private:
  void shuffle_epoch(std::uint64_t epoch);
  void copy_window(std::size_t start, token_batch& out, int row) const;

  std::vector<std::uint8_t> bytes_;
  int context_;
  std::uint64_t seed_;
  std::size_t train_bytes_;
  std::size_t train_windows_;
  std::size_t val_windows_;
  std::uint64_t position_ = 0;
  std::uint64_t epoch_ = ~std::uint64_t{0};
  std::vector<std::uint32_t> perm_;
  document_source documents_ = document_source::none;
  std::vector<std::size_t> starts_;
};

} // namespace troupe
