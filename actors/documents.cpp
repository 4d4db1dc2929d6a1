// Document boundaries of the byte corpus and the masks of its windows.
#include "actors/documents.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/tensor/random.hpp"

namespace troupe {

const std::vector<std::string>& document_source_names() {
  static const std::vector<std::string> names{"none", "chapters", "long_tail", "eot"};
  return names;
}

std::optional<document_source> parse_document_source(std::string_view name) {
  const auto& names = document_source_names();
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name)
      return static_cast<document_source>(i);
  return std::nullopt;
}

std::string_view to_string(document_source s) {
  return document_source_names()[static_cast<std::size_t>(s)];
}

std::vector<std::size_t> chapter_starts(std::span<const std::uint8_t> bytes) {
  std::vector<std::size_t> starts{0};
  bool after_blank = true, text_seen = false; // leading blank lines belong to the first document
  for (std::size_t i = 0; i < bytes.size();) {
    auto end = std::find(bytes.begin() + static_cast<std::ptrdiff_t>(i), bytes.end(), '\n') - bytes.begin();
    auto line = static_cast<std::size_t>(end) - i;
    bool blank = line == 0 || (line == 1 && bytes[i] == '\r');
    if (after_blank && !blank && bytes[i] != ' ' && bytes[i] != '\t' && text_seen)
      starts.push_back(i);
    after_blank = blank;
    text_seen = text_seen || !blank;
    i = static_cast<std::size_t>(end) + 1;
  }
  return starts;
}

std::vector<std::size_t> document_lengths_long_tail(std::size_t total, int context, std::uint64_t seed) {
  const double m = std::max(1, context / 8), alpha = 1.2, cap = 8.0 * context;
  std::uint64_t state = seed * 0x9e3779b97f4a7c15ull + 0x5851f42d4c957f2dull;
  std::vector<std::size_t> lengths;
  for (std::size_t covered = 0; covered < total;) {
    double u = (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53; // (0, 1]
    auto len = static_cast<std::size_t>(std::min(cap, std::ceil(m / std::pow(u, 1.0 / alpha))));
    len = std::min(len, total - covered);
    lengths.push_back(len);
    covered += len;
  }
  return lengths;
}

std::vector<std::size_t> starts_of(const std::vector<std::size_t>& lengths) {
  std::vector<std::size_t> starts;
  std::size_t at = 0;
  for (auto n : lengths)
    starts.push_back(at), at += n;
  return starts;
}

void window_documents(const std::vector<std::size_t>& starts, std::size_t begin, int n, std::int32_t* out) {
  // The last start at or before `begin`, then every start inside the window.
  auto it = std::upper_bound(starts.begin(), starts.end(), begin);
  std::int32_t current = 0;
  for (int t = 0; t < n; ++t) {
    if (it != starts.end() && *it == begin + static_cast<std::size_t>(t))
      current = t, ++it;
    out[t] = current;
  }
}

} // namespace troupe
