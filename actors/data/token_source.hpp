// A data source: where a run's tokens come from. Each kind (a text file read as
// bytes or through a tokenizer, a token file, JSON lines) is one file that
// registers its `data:` key, its option schema, its check and how it opens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/documents.hpp"
#include "runtime/graph/data_source_spec.hpp"
#include "runtime/graph/graph_spec.hpp"

namespace troupe {

/// One stream of tokens, read by position. Implementations are immutable once
/// opened, so windows copy from them in any order (a shuffled epoch, a resume).
class token_stream {
public:
  virtual ~token_stream() = default;
  /// Tokens in the stream.
  virtual std::size_t size() const = 0;
  /// Copies tokens [begin, begin + n) as i32; begin + n <= size().
  virtual void copy(std::size_t begin, std::size_t n, std::int32_t* out) const = 0;
  /// Where the stream's own documents start (ascending, the first 0) for `data.documents`
  /// `chapters` or `eot`: a text's chapters, a token file split after each end-of-text id,
  /// one JSON-lines record each. Throws std::runtime_error for a cut it cannot make.
  virtual std::vector<std::size_t> document_starts(document_source source) const;
};

/// What a source opens: the training stream, and a separate validation stream
/// (`val_tokens:`) or none, when the last data.val_fraction of the training one is held out.
struct opened_source {
  std::unique_ptr<token_stream> train;
  std::unique_ptr<token_stream> validation;
  std::string tokenizer_model; ///< the SentencePiece model that made the tokens (tokenizer::model()); empty: none
};

/// Tokens held in memory, cut into documents at `starts` for `data.documents: own`
/// (a tokenized text's chapters, JSON-lines records).
std::unique_ptr<token_stream> make_tokenized_stream(std::vector<std::int32_t> tokens, std::vector<std::size_t> starts,
                                                    document_source own);

/// A data source kind: what the graph loader checks (`info`) and how the data
/// loader opens it. `open` throws std::runtime_error naming the file on bad data.
struct data_source_kind {
  data_source_info info;
  std::function<opened_source(const graph_spec&)> open;
};

/// Registers a kind under info.name; false when the name is taken.
bool register_data_source(data_source_kind kind);
/// The registered kinds, in registration order.
std::vector<data_source_kind> registered_data_sources();
/// Opens the graph's data source (data.source), or throws std::runtime_error.
opened_source open_data_source(const graph_spec& g);

/// The built-in kinds (actors/data/*_source.cpp), registered by register_builtin_actors.
data_source_kind text_source_kind();
data_source_kind token_file_source_kind();
data_source_kind jsonl_source_kind();

} // namespace troupe
