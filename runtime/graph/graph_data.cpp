// The graph file's `data:` section: the data source kind is the one whose key
// is written (`corpus:`, `tokens:`, `jsonl:`), each other key is checked at its
// position against the settings that kind registered, and its file is checked
// (a readable regular file, then the kind's own check of its contents).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "runtime/graph/data_source_spec.hpp"
#include "runtime/graph/graph_parse.hpp"
#include "runtime/graph/limits.hpp"

namespace troupe {

namespace {

std::function<std::vector<data_source_info>()>& sources_source() {
  static std::function<std::vector<data_source_info>()> source;
  return source;
}

} // namespace

std::vector<data_source_info> data_sources() {
  if (const auto& source = sources_source())
    return source();
  // Without the actors module (runtime's own tests): the byte corpus, unchecked.
  return {{"text", "corpus", "a text file read as bytes", {}, {"chapters"}, {}}};
}

void set_data_sources(std::function<std::vector<data_source_info>()> source) {
  sources_source() = std::move(source);
}

namespace detail {

namespace {

using namespace troupe::limits;

/// The keys every source shares; the others are its own.
const std::vector<std::string> common_keys{"batch", "seed", "val_fraction", "documents", "deal"};

std::string_view head_of(std::string_view key) {
  return key.substr(0, key.find('.'));
}

/// The distinct first parts of the option keys under `prefix.` (`tokenizer.train.vocab` under `tokenizer`: `train`).
std::vector<std::string> keys_below(const std::vector<option_spec>& options, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& o : options)
    if (o.key.starts_with(prefix + ".")) {
      auto h = std::string{head_of(std::string_view{o.key}.substr(prefix.size() + 1))};
      if (std::find(out.begin(), out.end(), h) == out.end())
        out.push_back(h);
    }
  return out;
}

/// Reads the value `v` of `key` (at `path`, the option key `prefix.key`) with the
/// options of `kind`: a value, or a mapping of nested options (`tokenizer: {model: F}`).
void read_nested(const YAML::Node& map, const std::string& path, const std::string& key, const std::string& prefix,
                 const data_source_info& kind, std::map<std::string, std::string>& out, graph_reader& r) {
  auto full = prefix.empty() ? key : prefix + "." + key;
  for (const auto& o : kind.options)
    if (o.key == full) {
      read_option(map, path, key, o, out, r);
      return;
    }
  auto below = keys_below(kind.options, full);
  auto v = child(map, key);
  auto kpath = join_path(path, key);
  if (below.empty()) {
    r.error(v, kpath, fmt::format("unknown key '{}' {}", key, choices(key, keys_below(kind.options, prefix))));
    return;
  }
  if (!r.check_map(v, kpath, below))
    return;
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it->first.IsScalar() &&
        std::find(below.begin(), below.end(), it->first.Scalar()) != below.end()) // others: reported by check_map
      read_nested(v, kpath, it->first.Scalar(), full, kind, out, r);
}

/// The keys `data:` takes with `kind`: its file key and settings, the shared keys, the other kinds' file keys.
std::vector<std::string> keys_of(const data_source_info& kind, const std::vector<data_source_info>& kinds) {
  std::vector<std::string> out{kind.key};
  for (const auto& o : kind.options)
    if (auto h = std::string{head_of(o.key)}; std::find(out.begin(), out.end(), h) == out.end())
      out.push_back(h);
  out.insert(out.end(), common_keys.begin(), common_keys.end());
  for (const auto& k : kinds)
    if (&k != &kind)
      out.push_back(k.key);
  return out;
}

/// The kinds whose options include the top-level key `key`.
std::vector<std::string> owners_of(const std::vector<data_source_info>& kinds, std::string_view key) {
  std::vector<std::string> out;
  for (const auto& k : kinds)
    if (std::any_of(k.options.begin(), k.options.end(), [&](const auto& o) { return head_of(o.key) == key; }))
      out.push_back(fmt::format("'{}' ({}: FILE)", k.name, k.key));
  return out;
}

} // namespace

void parse_data(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  auto& d = pg.graph.data;
  pg.data_node.reset(n);
  if (!n.IsMap())
    return; // reported by parse_data_source, with the keys it knows
  r.require(n, "data", "batch");
  r.get_int(n, "data", "batch", d.batch, 1, max_batch);
  std::int64_t seed = static_cast<std::int64_t>(d.seed);
  if (r.get_int(n, "data", "seed", seed, 0, std::numeric_limits<std::int64_t>::max()))
    d.seed = static_cast<std::uint64_t>(seed);
  r.get_double(n, "data", "val_fraction", d.val_fraction, 0.0, 0.5);
  const std::vector<std::string> deals{"in_order", "heaviest_first"};
  if (auto deal = child(n, "deal");
      deal && r.get_string(n, "data", "deal", d.deal) && std::find(deals.begin(), deals.end(), d.deal) == deals.end())
    r.error(deal, "data.deal", fmt::format("unknown deal '{}' {}", d.deal, choices(d.deal, deals)));
}

void parse_data_source(parsed_graph& pg, graph_reader& r) {
  auto& d = pg.graph.data;
  const YAML::Node& n = pg.data_node;
  if (!n)
    return; // a missing section is reported with the others
  auto kinds = data_sources();
  std::vector<std::string> known = common_keys;
  for (const auto& k : kinds) {
    known.push_back(k.key);
    for (const auto& o : k.options)
      if (auto h = std::string{head_of(o.key)}; std::find(known.begin(), known.end(), h) == known.end())
        known.push_back(h);
  }
  if (!n.IsMap()) {
    r.check_map(n, "data", known);
    return;
  }
  // The kind: the one whose key is written; the byte corpus `corpus: kjv` when none is.
  const data_source_info* kind = nullptr;
  for (auto it = n.begin(); it != n.end(); ++it)
    for (const auto& k : kinds)
      if (it->first.IsScalar() && it->first.Scalar() == k.key) {
        if (kind && kind != &k)
          pg.data_conflict = true,
          r.error(it->first, join_path("data", k.key),
                  fmt::format("a run reads one data source: '{}' and '{}' are both written", kind->key, k.key));
        else
          kind = &k;
      }
  if (!kind)
    for (const auto& k : kinds)
      if (k.key == "corpus")
        kind = &k;
  if (!kind) {
    r.error(n, "data", fmt::format("no data source: write one of the keys {}", fmt::join(known, ", ")));
    return;
  }
  d.source = kind->name;
  d.source_key = kind->key;
  std::map<std::string, int> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar()) {
      r.error(it->first, "data", fmt::format("expected a key name, got {}", describe(it->first)));
      continue;
    }
    const auto& key = it->first.Scalar();
    if (seen[key]++) {
      r.error(it->first, join_path("data", key), fmt::format("duplicate key '{}'", key));
      continue;
    }
    if (std::find(common_keys.begin(), common_keys.end(), key) != common_keys.end() ||
        std::any_of(kinds.begin(), kinds.end(), [&](const auto& k) { return k.key == key; }))
      continue;
    bool own =
      std::any_of(kind->options.begin(), kind->options.end(), [&](const auto& o) { return head_of(o.key) == key; });
    if (own)
      read_nested(n, "data", key, "", *kind, d.options, r);
    else if (auto owners = owners_of(kinds, key); !owners.empty())
      r.error(it->first, join_path("data", key),
              fmt::format("'{}' is a setting of data source {}, not of '{}' ({}: FILE)", key, fmt::join(owners, ", "),
                          kind->name, kind->key));
    else
      r.error(it->first, join_path("data", key),
              fmt::format("unknown key '{}' {}", key, choices(key, keys_of(*kind, kinds))));
  }
  for (const auto& o : kind->options) {
    if (!o.fallback.empty())
      d.options.emplace(o.key, o.fallback); // keeps what was written
    if (auto v = d.options.find(o.key); o.file && v != d.options.end())
      v->second = pg.resolve(v->second).string();
  }
  if (auto file = child(n, kind->key)) {
    r.get_string(n, "data", kind->key, d.corpus);
    pg.corpus_node.reset(file);
  } else if (kind->key != "corpus") { // only the byte corpus has a default file
    r.error(n, join_path("data", kind->key), fmt::format("missing required key '{}'", kind->key));
  }
  // The names actors/documents.hpp reads (document_source_names()) that this kind cuts.
  std::vector<std::string> sources{"none"};
  sources.insert(sources.end(), kind->documents.begin(), kind->documents.end());
  sources.push_back("long_tail");
  const std::vector<std::string> every{"none", "chapters", "long_tail", "eot"};
  if (auto docs = child(n, "documents"); docs && r.get_string(n, "data", "documents", d.documents) &&
                                         std::find(sources.begin(), sources.end(), d.documents) == sources.end())
    r.error(docs, "data.documents",
            std::find(every.begin(), every.end(), d.documents) == every.end()
              ? fmt::format("unknown document source '{}' {}", d.documents, choices(d.documents, sources))
              : fmt::format("data source '{}' cannot cut documents '{}' {}", kind->name, d.documents,
                            choices(d.documents, sources)));
}

void check_data(parsed_graph& pg, graph_reader& r) {
  auto& d = pg.graph.data;
  if (pg.data_conflict)
    return; // which file to check is not known
  auto path = join_path("data", d.source_key);
  YAML::Node at = pg.corpus_node ? pg.corpus_node : child(pg.root, "data");
  std::error_code ec;
  auto noun =
    d.source_key == "tokens" ? std::string{"token file"} : d.source_key + " file"; // "corpus file", "jsonl file"
  if (d.source_key == "corpus" && d.corpus == "kjv") {
    d.corpus_path = default_corpus_path();
    if (!std::filesystem::is_regular_file(d.corpus_path, ec)) {
      r.error(at, path,
              fmt::format("the King James Bible corpus is missing (looked for {}): run deploy/setup.sh, or "
                          "set TROUPE_DATA to a folder holding kjv.txt",
                          d.corpus_path.string()));
      return;
    }
  } else {
    d.corpus_path = pg.resolve(d.corpus);
    if (auto st = std::filesystem::status(d.corpus_path, ec); !std::filesystem::is_regular_file(st)) {
      // Say what is there: a folder, /dev/zero or a FIFO is not "missing".
      auto kind = d.source_key == "tokens" ? "token" : "text";
      auto what = !std::filesystem::exists(st)        ? std::string{"does not exist"}
                  : std::filesystem::is_directory(st) ? fmt::format("is a directory, not a {} file", kind)
                  : std::filesystem::is_fifo(st)
                    ? fmt::format("is a FIFO (a pipe), not a {} file", kind)
                    : fmt::format("is a device or other special file, not a {} file", kind);
      r.error(at, path,
              fmt::format("{} '{}' {} (a path is relative to the graph file's folder{})", noun, d.corpus, what,
                          d.source_key == "corpus" ? "; 'kjv' names the default corpus" : ""));
      return;
    }
  }
  // Open it as the data loader will: existing is not enough (chmod 000, an
  // unprivileged user), and a run that cannot read it has nothing to train on.
  if (std::ifstream in{d.corpus_path, std::ios::binary}; !in) {
    r.error(at, path,
            fmt::format("{} '{}' cannot be read: {}", noun, d.corpus == "kjv" ? d.corpus_path.string() : d.corpus,
                        std::strerror(errno)));
    return;
  }
  for (const auto& k : data_sources())
    if (k.name == d.source && k.check)
      k.check(pg.graph, r.out());
}

} // namespace detail

} // namespace troupe
