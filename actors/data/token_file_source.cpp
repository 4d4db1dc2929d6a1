// The `tokens:` data source: a file of token ids as nanoGPT and llm.c write
// them, a flat little-endian array of uint16 or uint32, memory-mapped and never
// read whole. llm.c's files start with a 256 × int32 header (karpathy/llm.c,
// dev/data/data_common.py: magic 20240520, version 1 for GPT-2's uint16 tokens;
// magic 20240801, version 7 for Llama 3's uint32), then the token count: it is
// recognised by its magic and checked against the file's length.
#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/data/mapped_file.hpp"
#include "actors/data/token_source.hpp"

namespace troupe {

namespace {

static_assert(std::endian::native == std::endian::little, "token files are little-endian");

/// Where a token file's tokens are: after the header (if any), `width` bytes each.
struct token_layout {
  std::size_t header = 0;
  std::size_t width = 2;
  std::size_t count = 0;
};

constexpr std::int32_t llmc_gpt2_magic = 20240520, llmc_llama3_magic = 20240801;
constexpr std::size_t llmc_header_bytes = 256 * sizeof(std::int32_t);

/// The layout of `f` for the declared `dtype` (uint16 or uint32), or what is wrong.
std::optional<token_layout> layout_of(const mapped_file& f, const std::string& dtype, const std::string& name,
                                      std::string& why) {
  token_layout l;
  l.width = dtype == "uint32" ? 4 : 2;
  if (f.size() == 0) {
    why = fmt::format("token file '{}' is empty", name);
    return std::nullopt;
  }
  if (f.size() >= llmc_header_bytes) {
    std::int32_t h[3];
    std::memcpy(h, f.bytes().data(), sizeof h);
    if ((h[0] == llmc_gpt2_magic && h[1] == 1) || (h[0] == llmc_llama3_magic && h[1] == 7)) {
      std::size_t width = h[0] == llmc_gpt2_magic ? 2 : 4;
      if (width != l.width) {
        why = fmt::format("token file '{}' has llm.c's header for uint{} tokens, but data.dtype is {}", name, width * 8,
                          dtype);
        return std::nullopt;
      }
      l.header = llmc_header_bytes;
      auto held = (f.size() - l.header) / l.width;
      if (h[2] < 0 || static_cast<std::size_t>(h[2]) != held || (f.size() - l.header) % l.width != 0) {
        why = fmt::format("token file '{}': its llm.c header counts {} tokens, but it holds {} bytes of tokens ({} "
                          "{} tokens)",
                          name, h[2], f.size() - l.header, static_cast<double>(f.size() - l.header) / l.width, dtype);
        return std::nullopt;
      }
    }
  }
  if ((f.size() - l.header) % l.width != 0) {
    why = fmt::format("token file '{}' holds {} bytes of tokens, not a multiple of {} ({} tokens): is it "
                      "truncated, or not {}?",
                      name, f.size() - l.header, l.width, dtype, dtype);
    return std::nullopt;
  }
  l.count = (f.size() - l.header) / l.width;
  return l;
}

template <class T>
std::optional<std::size_t> first_at_least(std::span<const std::uint8_t> bytes, std::uint64_t vocab) {
  auto n = bytes.size() / sizeof(T);
  const auto* p = reinterpret_cast<const T*>(bytes.data());
  T most = 0;
  for (std::size_t i = 0; i < n; ++i) // a max first: vectorised, and the usual answer is "none"
    most = std::max(most, p[i]);
  if (most < vocab)
    return std::nullopt;
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] >= vocab)
      return i;
  return std::nullopt;
}

/// The first token at or above `vocab` (its index and value), walking only the
/// file's data (a hole reads as token 0).
std::optional<std::pair<std::size_t, std::uint32_t>> first_bad_token(const mapped_file& f, const token_layout& l,
                                                                     std::uint64_t vocab) {
  std::optional<std::pair<std::size_t, std::uint32_t>> bad;
  f.for_each_data(l.header, [&](std::size_t offset, std::span<const std::uint8_t> piece) {
    auto skip = (l.width - (offset - l.header) % l.width) % l.width; // extents are block-aligned: 0
    piece = piece.subspan(std::min(skip, piece.size()));
    auto at = l.width == 2 ? first_at_least<std::uint16_t>(piece, vocab) : first_at_least<std::uint32_t>(piece, vocab);
    if (!at)
      return true;
    auto index = (offset + skip - l.header) / l.width + *at;
    std::uint32_t v = 0;
    std::memcpy(&v, f.bytes().data() + l.header + index * l.width, l.width);
    bad.emplace(index, v);
    return false;
  });
  return bad;
}

const std::string* option(const graph_spec& g, const std::string& key) {
  auto it = g.data.options.find(key);
  return it == g.data.options.end() ? nullptr : &it->second;
}

std::uint64_t vocab_of(const graph_spec& g) {
  const auto* v = option(g, "vocab");
  return v ? std::stoull(*v) : static_cast<std::uint64_t>(g.model.vocab);
}

std::string vocab_key(const graph_spec& g) {
  return option(g, "vocab") ? "data.vocab" : "model.vocab";
}

class token_file_stream final : public token_stream {
public:
  token_file_stream(const std::filesystem::path& path, const graph_spec& g, const std::string& name) : file_(path) {
    std::string why;
    auto l = layout_of(file_, *option(g, "dtype"), name, why);
    if (!l)
      throw std::runtime_error(why);
    layout_ = *l;
    if (auto bad = first_bad_token(file_, layout_, vocab_of(g)))
      throw std::runtime_error(fmt::format("token file '{}': token {} at index {} (byte {}) is not below {} {}", name,
                                           bad->second, bad->first, layout_.header + bad->first * layout_.width,
                                           vocab_key(g), vocab_of(g)));
    if (const auto* eot = option(g, "eot"))
      eot_ = std::stoull(*eot);
  }
  std::size_t size() const override { return layout_.count; }
  void copy(std::size_t begin, std::size_t n, std::int32_t* out) const override {
    const auto* p = file_.bytes().data() + layout_.header + begin * layout_.width;
    if (layout_.width == 2)
      for (std::size_t t = 0; t < n; ++t) {
        std::uint16_t v;
        std::memcpy(&v, p + 2 * t, 2);
        out[t] = v;
      }
    else
      for (std::size_t t = 0; t < n; ++t) {
        std::uint32_t v;
        std::memcpy(&v, p + 4 * t, 4);
        out[t] = static_cast<std::int32_t>(v);
      }
  }
  /// A document starts after each end-of-text id.
  std::vector<std::size_t> document_starts(document_source source) const override {
    if (source != document_source::eot || !eot_)
      return token_stream::document_starts(source);
    std::vector<std::size_t> starts{0};
    std::int32_t buf[4096];
    for (std::size_t at = 0; at < size(); at += std::size(buf)) {
      auto n = std::min(std::size(buf), size() - at);
      copy(at, n, buf);
      for (std::size_t i = 0; i < n; ++i)
        if (static_cast<std::uint64_t>(buf[i]) == *eot_ && at + i + 1 < size())
          starts.push_back(at + i + 1);
    }
    return starts;
  }

private:
  mapped_file file_;
  token_layout layout_;
  std::optional<std::uint64_t> eot_;
};

opened_source open_tokens(const graph_spec& g) {
  opened_source s;
  s.train = std::make_unique<token_file_stream>(g.data.corpus_path, g, g.data.corpus);
  if (const auto* val = option(g, "val_tokens"))
    s.validation = std::make_unique<token_file_stream>(*val, g, *val);
  return s;
}

/// One file's checks: its layout, its ids against the vocabulary, its length against the context.
void check_file(const graph_spec& g, const std::filesystem::path& path, const std::string& name, const std::string& key,
                bool held_out, diagnostics& out) {
  auto where = g.where(key);
  std::error_code ec;
  if (auto st = std::filesystem::status(path, ec); !std::filesystem::is_regular_file(st)) {
    out.push_back({where, key,
                   fmt::format("token file '{}' {}", name,
                               std::filesystem::exists(st) ? "is not a regular file" : "does not exist")});
    return;
  }
  try {
    mapped_file f(path);
    std::string why;
    auto l = layout_of(f, *option(g, "dtype"), name, why);
    if (!l) {
      out.push_back({where, key, why});
      return;
    }
    if (auto bad = first_bad_token(f, *l, vocab_of(g))) {
      out.push_back(
        {where, key,
         fmt::format("token file '{}': token {} at index {} (byte {}) is not below {} {}", name, bad->second,
                     bad->first, l->header + bad->first * l->width, vocab_key(g), vocab_of(g))});
      return;
    }
    auto need = static_cast<std::size_t>(g.model.context) + 1;
    auto train =
      held_out ? static_cast<std::size_t>(static_cast<double>(l->count) * (1.0 - g.data.val_fraction)) : l->count;
    if (train < need || (held_out && l->count - train < need))
      out.push_back(
        {where, key,
         fmt::format("token file '{}' holds {} tokens: too short for context {}{} (each part needs "
                     "context + 1 = {} tokens)",
                     name, l->count, g.model.context,
                     held_out ? fmt::format(" with a {:.0f}% validation split", g.data.val_fraction * 100) : "",
                     need)});
  } catch (const std::exception& e) {
    out.push_back({where, key, e.what()});
  }
}

void check_tokens(const graph_spec& g, diagnostics& out) {
  auto vocab = vocab_of(g);
  if (const auto* v = option(g, "vocab"); v && vocab > static_cast<std::uint64_t>(g.model.vocab)) {
    out.push_back({g.where("data.vocab"), "data.vocab",
                   fmt::format("the tokens' vocabulary of {} does not fit model.vocab {}: raise model.vocab to at "
                               "least {}",
                               vocab, g.model.vocab, vocab)});
    return;
  }
  if (const auto* eot = option(g, "eot"); eot && std::stoull(*eot) >= vocab)
    out.push_back({g.where("data.eot"), "data.eot",
                   fmt::format("end-of-text id {} is not below {} {}", *eot, vocab_key(g), vocab)});
  if (g.data.documents == "eot" && !option(g, "eot"))
    out.push_back({g.where("data.documents"), "data.documents",
                   "documents 'eot' split the tokens at the end-of-text id: give it as data.eot"});
  const auto* val = option(g, "val_tokens");
  check_file(g, g.data.corpus_path, g.data.corpus, "data.tokens", !val, out);
  if (val)
    check_file(g, *val, *val, "data.val_tokens", false, out);
}

} // namespace

data_source_kind token_file_source_kind() {
  auto vocab = int_setting_spec("vocab", "the vocabulary the ids come from (default: model.vocab)", 0, 2, 1ll << 32);
  auto eot =
    int_setting_spec("eot", "the end-of-text id: documents end after it (`documents: eot`)", 0, 0, (1ll << 32) - 1);
  vocab.fallback.clear(), eot.fallback.clear();
  return {
    {"tokens",
     "tokens",
     "a file of token ids as nanoGPT and llm.c write them (uint16 or uint32, little-endian), memory-mapped",
     {choice_setting_spec("dtype", "the width of a token id", {"uint16", "uint32"}), vocab,
      file_setting_spec("val_tokens", "a token file to validate on (default: the last val_fraction of tokens)"), eot},
     {"eot"},
     check_tokens},
    open_tokens};
}

} // namespace troupe
