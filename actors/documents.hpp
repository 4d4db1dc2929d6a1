// Documents of varying length in the byte corpus: where each document starts,
// and the document-causal mask of a window (no token attends across a boundary).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

/// How the corpus is cut into documents (`data.documents`).
enum class document_source {
  none,      ///< the corpus is one document: plain causal attention over each window
  chapters,  ///< the corpus's own boundaries: a header line (not indented, after a blank line) starts one,
             ///< the KJV's chapters ("Genesis 1"): 1189 of them, 1 to 14 KB
  long_tail, ///< synthetic lengths from a capped Pareto law (document_lengths_long_tail)
  eot,       ///< the source's end-of-text marks: a token file's `eot:` id, each JSON-lines record
};

/// The names `data.documents` accepts, in document_source order.
const std::vector<std::string>& document_source_names();
std::optional<document_source> parse_document_source(std::string_view name);
std::string_view to_string(document_source s);

/// Offsets (ascending, the first 0) where a chapter header line starts in `bytes`:
/// a line at column 0 that is not blank and follows a blank line or the start.
std::vector<std::size_t> chapter_starts(std::span<const std::uint8_t> bytes);

/// Document lengths in tokens, long-tailed like the pre-training mixes DistCA
/// balances (Zhuang et al. 2025, arXiv:2510.18121, §2: most documents short, a
/// few long ones holding much of the tokens): L = ⌈m / U^(1/α)⌉ with U uniform in
/// (0, 1], m = max(1, context / 8), α = 1.2, capped at 8·context, drawn from
/// `seed` until they cover `total` tokens (the last one cut to fit). With α = 1.2
/// the top 5% of an uncapped draw hold 0.05^(1 − 1/α) ≈ 61% of the tokens; the cap
/// keeps a few percent of documents longer than a window.
std::vector<std::size_t> document_lengths_long_tail(std::size_t total, int context, std::uint64_t seed);

/// Offsets where documents of `lengths` start when laid end to end from 0.
std::vector<std::size_t> starts_of(const std::vector<std::size_t>& lengths);

/// The document starts of the window of `n` tokens at corpus offset `begin`:
/// out[t] = position in the window of the first token of token t's document
/// (0 for a document that began before the window: the window cannot see its
/// earlier part). `starts` ascending. The mask form kernels/cpu/attention.hpp reads.
void window_documents(const std::vector<std::size_t>& starts, std::size_t begin, int n, std::int32_t* out);

} // namespace troupe
