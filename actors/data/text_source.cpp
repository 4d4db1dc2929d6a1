// The `corpus:` data source: a text file read as bytes (memory-mapped), or
// tokenized chapter by chapter with a SentencePiece tokenizer
// (`tokenizer: {model: FILE}` or `tokenizer: {train: {vocab: N}}`).
#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "actors/data/mapped_file.hpp"
#include "actors/data/token_corpus.hpp"
#include "actors/data/tokenizer.hpp"

namespace troupe {

namespace {

/// The file's bytes are its tokens.
class byte_stream final : public token_stream {
public:
  explicit byte_stream(const std::filesystem::path& path) : file_(path) {}
  std::size_t size() const override { return file_.size(); }
  void copy(std::size_t begin, std::size_t n, std::int32_t* out) const override {
    const auto* p = file_.bytes().data() + begin;
    for (std::size_t t = 0; t < n; ++t)
      out[t] = p[t];
  }
  std::vector<std::size_t> document_starts(document_source source) const override {
    return source == document_source::chapters ? chapter_starts(file_.bytes()) : token_stream::document_starts(source);
  }

private:
  mapped_file file_;
};

} // namespace

/// Tokens held in memory with the starts of their documents (a tokenized text's
/// chapters, JSON-lines records), for the sources that tokenize as they open.
class tokenized_stream final : public token_stream {
public:
  tokenized_stream(std::vector<std::int32_t> tokens, std::vector<std::size_t> starts, document_source own)
      : tokens_(std::move(tokens)), starts_(std::move(starts)), own_(own) {}
  std::size_t size() const override { return tokens_.size(); }
  void copy(std::size_t begin, std::size_t n, std::int32_t* out) const override {
    std::copy_n(tokens_.begin() + static_cast<std::ptrdiff_t>(begin), n, out);
  }
  std::vector<std::size_t> document_starts(document_source source) const override {
    return source == own_ ? starts_ : token_stream::document_starts(source);
  }

private:
  std::vector<std::int32_t> tokens_;
  std::vector<std::size_t> starts_;
  document_source own_;
};

std::unique_ptr<token_stream> make_tokenized_stream(std::vector<std::int32_t> tokens, std::vector<std::size_t> starts,
                                                    document_source own) {
  return std::make_unique<tokenized_stream>(std::move(tokens), std::move(starts), own);
}

namespace {

opened_source open_text(const graph_spec& g) {
  if (!uses_sentencepiece(g))
    return {std::make_unique<byte_stream>(g.data.corpus_path), nullptr, {}};
  mapped_file file(g.data.corpus_path);
  auto text = file.bytes();
  auto chapters = chapter_starts(text);
  auto piece = [&](std::size_t i) {
    auto end = i + 1 < chapters.size() ? chapters[i + 1] : text.size();
    return std::string_view{reinterpret_cast<const char*>(text.data()) + chapters[i], end - chapters[i]};
  };
  auto tok = make_tokenizer(g, [&](const auto& visit) {
    for (std::size_t i = 0; i < chapters.size(); ++i)
      visit(piece(i));
  });
  // Chapter by chapter, so a chapter's tokens start where it does (`documents: chapters`).
  std::vector<std::int32_t> tokens;
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < chapters.size(); ++i) {
    starts.push_back(tokens.size());
    tok->encode(piece(i), tokens);
  }
  return {make_tokenized_stream(std::move(tokens), std::move(starts), document_source::chapters), nullptr,
          tok->model()};
}

/// A byte corpus needs a training and a validation window of context + 1 bytes
/// (a tokenized one is counted when it opens: its length is known only then).
void check_text(const graph_spec& g, diagnostics& out) {
  check_tokenizer(g, out);
  std::error_code ec;
  auto size = std::filesystem::file_size(g.data.corpus_path, ec);
  if (ec)
    return;
  const auto& d = g.data;
  if (size == 0) {
    out.push_back({g.where("data.corpus"), "data.corpus", fmt::format("corpus file '{}' is empty", d.corpus)});
    return;
  }
  if (uses_sentencepiece(g))
    return;
  auto need = static_cast<std::uintmax_t>(g.model.context) + 1;
  auto train = static_cast<std::uintmax_t>(static_cast<double>(size) * (1.0 - d.val_fraction));
  if (size >= 2 * need + 2 && train >= need && size - train < need) { // the corpus is long enough; the share is not
    bool written = g.key_positions.count("data.val_fraction") > 0;
    auto key = written ? "data.val_fraction" : "data.corpus";
    out.push_back({g.where(key), key,
                   fmt::format("a validation share of {:g} leaves {} of the corpus's {} bytes for validation, and it "
                               "needs context + 1 = {}: use val_fraction {:.2g} or more",
                               d.val_fraction, size - train, size, need,
                               std::min(0.5, static_cast<double>(need + 1) / static_cast<double>(size)))});
  } else if (train < need || size - train < need) {
    out.push_back({g.where("data.corpus"), "data.corpus",
                   fmt::format("corpus file '{}' holds {} bytes: too short for context {} with a {:.0f}% validation "
                               "split (each part needs context + 1 = {} bytes)",
                               d.corpus, size, g.model.context, d.val_fraction * 100, need)});
  }
}

} // namespace

token_corpus::token_corpus(const std::filesystem::path& path, int context, double val_fraction, std::uint64_t seed)
    : token_corpus(opened_source{std::make_unique<byte_stream>(path), nullptr, {}}, context, val_fraction, seed) {}

data_source_kind text_source_kind() {
  return {{"text",
           "corpus",
           "a text file (`kjv`: the King James Bible) read as bytes, or through a SentencePiece tokenizer",
           tokenizer_options(),
           {"chapters"},
           check_text},
          open_text};
}

} // namespace troupe
