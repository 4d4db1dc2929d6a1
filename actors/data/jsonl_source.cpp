// The `jsonl:` data source: JSON lines, one record per line, whose text field
// (`field: text`) is tokenized with bytes or a SentencePiece tokenizer; each
// record is a document (`documents: eot`). Parsed with nlohmann::json.
#include <cstring>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/data/mapped_file.hpp"
#include "actors/data/token_source.hpp"
#include "actors/data/tokenizer.hpp"

namespace troupe {

namespace {

/// A line longer than this is refused, not read on: a file of zeros has no line ends.
constexpr std::size_t max_line = std::size_t{16} << 20;

const std::string& field_of(const graph_spec& g) {
  return g.data.options.at("field");
}

/// Calls `visit` with the text of each record of `f`, in order; what is wrong
/// with the file (naming its line), or an empty string.
std::string for_each_record(const mapped_file& f, const std::string& name, const std::string& field,
                            const std::function<void(std::string_view)>& visit) {
  auto bytes = f.bytes();
  std::size_t line = 0, records = 0;
  for (std::size_t at = 0; at < bytes.size();) {
    ++line;
    auto window = std::min(bytes.size() - at, max_line + 1);
    const auto* nl = static_cast<const std::uint8_t*>(std::memchr(bytes.data() + at, '\n', window));
    if (!nl && window > max_line)
      return fmt::format("jsonl file '{}': line {} is longer than {} MiB", name, line, max_line >> 20);
    auto end = nl ? static_cast<std::size_t>(nl - bytes.data()) : bytes.size();
    std::string_view text{reinterpret_cast<const char*>(bytes.data()) + at, end - at};
    at = end + 1;
    if (text.find_first_not_of(" \t\r") == std::string_view::npos)
      continue; // blank lines separate nothing
    auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
      return fmt::format("jsonl file '{}': line {} is not JSON", name, line);
    if (!j.is_object() || !j.contains(field) || !j[field].is_string())
      return fmt::format("jsonl file '{}': line {} has no text field '{}' (data.field names it)", name, line, field);
    visit(j[field].get_ref<const std::string&>());
    ++records;
  }
  if (records == 0)
    return fmt::format("jsonl file '{}' holds no records", name);
  return {};
}

opened_source open_jsonl(const graph_spec& g) {
  mapped_file f(g.data.corpus_path);
  auto pieces = [&](const std::function<void(std::string_view)>& visit) {
    if (auto why = for_each_record(f, g.data.corpus, field_of(g), visit); !why.empty())
      throw std::runtime_error(why);
  };
  auto tok = make_tokenizer(g, pieces);
  std::vector<std::int32_t> tokens;
  std::vector<std::size_t> starts;
  pieces([&](std::string_view text) {
    starts.push_back(tokens.size());
    tok->encode(text, tokens);
  });
  return {make_tokenized_stream(std::move(tokens), std::move(starts), document_source::eot), nullptr, tok->model()};
}

void check_jsonl(const graph_spec& g, diagnostics& out) {
  check_tokenizer(g, out);
  try {
    mapped_file f(g.data.corpus_path);
    if (f.size() == 0) {
      out.push_back({g.where("data.jsonl"), "data.jsonl", fmt::format("jsonl file '{}' is empty", g.data.corpus)});
      return;
    }
    if (auto why = for_each_record(f, g.data.corpus, field_of(g), [](std::string_view) {}); !why.empty())
      out.push_back({g.where("data.jsonl"), "data.jsonl", why});
  } catch (const std::exception& e) {
    out.push_back({g.where("data.jsonl"), "data.jsonl", e.what()});
  }
}

} // namespace

data_source_kind jsonl_source_kind() {
  auto options = tokenizer_options();
  options.insert(options.begin(), text_setting_spec("field", "the field of each record that holds its text", "text"));
  return {{"jsonl",
           "jsonl",
           "JSON lines, one record a line, whose text field is tokenized",
           std::move(options),
           {"eot"},
           check_jsonl},
          open_jsonl};
}

} // namespace troupe
