// Reading the byte corpus and cutting it into shuffled training windows.
#include "actors/byte_corpus.hpp"
#include "runtime/tensor/random.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe {

namespace {

void ensure(tensor_handle& h, int batch, int context) {
  shape_t want{batch, context};
  if (!h.defined() || !(h.shape() == want))
    h = tensor_handle::empty(want, dtype::i32);
}

void ensure(token_batch& b, int batch, int context, bool documents) {
  ensure(b.tokens, batch, context);
  ensure(b.targets, batch, context);
  if (documents)
    ensure(b.documents, batch, context);
  else
    b.documents = {};
}

} // namespace

byte_corpus::byte_corpus(const std::filesystem::path& path, int context, double val_fraction, std::uint64_t seed)
    : context_(context), seed_(seed) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(fmt::format("{}: cannot read corpus file ({})", path.string(),
                                         std::filesystem::exists(path) ? "permission denied" : "no such file"));
  bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  auto window = static_cast<std::size_t>(context) + 1;
  train_bytes_ = static_cast<std::size_t>(static_cast<double>(bytes_.size()) * (1.0 - val_fraction));
  auto val_bytes = bytes_.size() - train_bytes_;
  // Windows overlap by one byte: the last target of one is the first token of the next.
  train_windows_ = train_bytes_ >= window ? (train_bytes_ - 1) / static_cast<std::size_t>(context) : 0;
  val_windows_ = val_bytes >= window ? (val_bytes - 1) / static_cast<std::size_t>(context) : 0;
  if (train_windows_ == 0 || val_windows_ == 0)
    throw std::runtime_error(fmt::format("{}: corpus of {} bytes is too short for context {} with a {:.0f}% "
                                         "validation split",
                                         path.string(), bytes_.size(), context, val_fraction * 100));
}

void byte_corpus::shuffle_epoch(std::uint64_t epoch) {
  perm_.resize(train_windows_);
  for (std::size_t i = 0; i < perm_.size(); ++i)
    perm_[i] = static_cast<std::uint32_t>(i);
  std::uint64_t state = seed_ * 0x2545f4914f6cdd1dull + epoch;
  for (std::size_t i = perm_.size(); i > 1; --i) // Fisher-Yates
    std::swap(perm_[i - 1], perm_[splitmix64(state) % i]);
  epoch_ = epoch;
}

void byte_corpus::set_documents(document_source source) {
  documents_ = source;
  switch (source) {
  case document_source::none:
    starts_.clear();
    break;
  case document_source::chapters:
    starts_ = chapter_starts(bytes_);
    break;
  case document_source::long_tail:
    starts_ = starts_of(document_lengths_long_tail(bytes_.size(), context_, seed_));
    break;
  }
}

void byte_corpus::copy_window(std::size_t start, token_batch& out, int row) const {
  auto* tokens = out.tokens.data<std::int32_t>() + row * context_;
  auto* targets = out.targets.data<std::int32_t>() + row * context_;
  if (documents_ != document_source::none)
    window_documents(starts_, start, context_, out.documents.data<std::int32_t>() + row * context_);
  const auto* p = bytes_.data() + start;
  for (int t = 0; t < context_; ++t) {
    tokens[t] = p[t];
    targets[t] = p[t + 1];
  }
}

void byte_corpus::next_train(int batch, token_batch& out) {
  ensure(out, batch, context_, documents_ != document_source::none);
  for (int b = 0; b < batch; ++b, ++position_) {
    auto epoch = position_ / train_windows_;
    if (epoch != epoch_)
      shuffle_epoch(epoch);
    auto w = perm_[position_ % train_windows_];
    copy_window(static_cast<std::size_t>(w) * static_cast<std::size_t>(context_), out, b);
  }
}

void byte_corpus::validation(int k, int batch, token_batch& out) const {
  ensure(out, batch, context_, documents_ != document_source::none);
  for (int b = 0; b < batch; ++b) {
    auto w =
      (static_cast<std::size_t>(k) * static_cast<std::size_t>(batch) + static_cast<std::size_t>(b)) % val_windows_;
    copy_window(train_bytes_ + w * static_cast<std::size_t>(context_), out, b);
  }
}

void byte_corpus::seek(std::uint64_t position) {
  position_ = position;
}

} // namespace troupe
