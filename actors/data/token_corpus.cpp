// Cutting a data source's tokens into shuffled training windows and fixed
// validation windows.
#include "actors/data/token_corpus.hpp"
#include "runtime/tensor/random.hpp"

#include <algorithm>
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

/// Windows of `context` + 1 tokens in `n` tokens: they overlap by one token, the
/// last target of one being the first token of the next.
std::size_t windows_in(std::size_t n, int context) {
  auto window = static_cast<std::size_t>(context) + 1;
  return n >= window ? (n - 1) / static_cast<std::size_t>(context) : 0;
}

} // namespace

token_corpus::token_corpus(opened_source source, int context, double val_fraction, std::uint64_t seed)
    : source_(std::move(source)), context_(context), seed_(seed) {
  auto total = source_.train->size();
  if (source_.validation) {
    train_tokens_ = total, val_begin_ = 0;
    val_windows_ = windows_in(source_.validation->size(), context);
  } else {
    train_tokens_ = static_cast<std::size_t>(static_cast<double>(total) * (1.0 - val_fraction));
    val_begin_ = train_tokens_;
    val_windows_ = windows_in(total - train_tokens_, context);
  }
  train_windows_ = windows_in(train_tokens_, context);
  if (train_windows_ == 0 || val_windows_ == 0)
    throw std::runtime_error(
      source_.validation
        ? fmt::format("{} training and {} validation tokens: too short for context {} (each needs context + 1 = {})",
                      total, source_.validation->size(), context, context + 1)
        : fmt::format("corpus of {} tokens is too short for context {} with a {:.0f}% validation split (each part "
                      "needs context + 1 = {})",
                      total, context, val_fraction * 100, context + 1));
}

void token_corpus::shuffle_epoch(std::uint64_t epoch) {
  perm_.resize(train_windows_);
  for (std::size_t i = 0; i < perm_.size(); ++i)
    perm_[i] = static_cast<std::uint32_t>(i);
  std::uint64_t state = seed_ * 0x2545f4914f6cdd1dull + epoch;
  for (std::size_t i = perm_.size(); i > 1; --i) // Fisher-Yates
    std::swap(perm_[i - 1], perm_[splitmix64(state) % i]);
  epoch_ = epoch;
}

void token_corpus::set_documents(document_source source) {
  documents_ = source;
  auto cut = [&](const token_stream& s) -> std::vector<std::size_t> {
    switch (source) {
    case document_source::none:
      return {};
    case document_source::long_tail:
      return starts_of(document_lengths_long_tail(s.size(), context_, seed_));
    default:
      return s.document_starts(source);
    }
  };
  starts_ = cut(*source_.train);
  val_starts_ = source_.validation ? cut(*source_.validation) : std::vector<std::size_t>{};
}

void token_corpus::copy_window(const token_stream& stream, const std::vector<std::size_t>& starts, std::size_t start,
                               token_batch& out, int row) const {
  auto* tokens = out.tokens.data<std::int32_t>() + row * context_;
  auto* targets = out.targets.data<std::int32_t>() + row * context_;
  if (documents_ != document_source::none)
    window_documents(starts, start, context_, out.documents.data<std::int32_t>() + row * context_);
  stream.copy(start, static_cast<std::size_t>(context_), tokens);
  stream.copy(start + 1, static_cast<std::size_t>(context_), targets);
}

void token_corpus::next_train(int batch, token_batch& out) {
  ensure(out, batch, context_, documents_ != document_source::none);
  for (int b = 0; b < batch; ++b, ++position_) {
    auto epoch = position_ / train_windows_;
    if (epoch != epoch_)
      shuffle_epoch(epoch);
    auto w = perm_[position_ % train_windows_];
    copy_window(*source_.train, starts_, static_cast<std::size_t>(w) * static_cast<std::size_t>(context_), out, b);
  }
}

void token_corpus::validation(int k, int batch, token_batch& out) const {
  ensure(out, batch, context_, documents_ != document_source::none);
  const auto& starts = source_.validation ? val_starts_ : starts_;
  for (int b = 0; b < batch; ++b) {
    auto w =
      (static_cast<std::size_t>(k) * static_cast<std::size_t>(batch) + static_cast<std::size_t>(b)) % val_windows_;
    copy_window(val_stream(), starts, val_begin_ + w * static_cast<std::size_t>(context_), out, b);
  }
}

void token_corpus::seek(std::uint64_t position) {
  position_ = position;
}

} // namespace troupe
