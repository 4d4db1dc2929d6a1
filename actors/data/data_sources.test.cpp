// The data sources through the graph loader, as `troupe check` and the data
// loader see them: token files (plain and with llm.c's header), JSON lines and
// SentencePiece text give the file's tokens, and bad data is refused at its key.
#include <cstdio>
#include <fstream>
#include <sys/resource.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "actors/data/token_corpus.hpp"
#include "actors/data/tokenizer.hpp"
#include "tests/data_graph.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

/// Token ids 0 .. vocab - 1 from a xorshift, with `eot` after every 50th when given.
std::vector<std::uint32_t> some_tokens(std::size_t n, std::uint32_t vocab, std::int64_t eot = -1) {
  std::vector<std::uint32_t> out;
  std::uint64_t x = 88172645463325252ull;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    out.push_back(eot >= 0 && i % 50 == 49 ? static_cast<std::uint32_t>(eot) : static_cast<std::uint32_t>(x % vocab));
  }
  return out;
}

template <class T>
void write_tokens(const fs::path& p, const std::vector<std::uint32_t>& tokens, bool llmc_header = false) {
  std::ofstream out(p, std::ios::binary);
  if (llmc_header) {
    std::int32_t h[256] = {sizeof(T) == 2 ? 20240520 : 20240801, sizeof(T) == 2 ? 1 : 7,
                           static_cast<std::int32_t>(tokens.size())};
    out.write(reinterpret_cast<const char*>(h), sizeof h);
  }
  for (auto t : tokens) {
    T v = static_cast<T>(t);
    out.write(reinterpret_cast<const char*>(&v), sizeof v);
  }
}

std::vector<std::int32_t> row(const tensor_handle& h, int r, int n) {
  return {h.data<std::int32_t>() + r * n, h.data<std::int32_t>() + (r + 1) * n};
}

/// Every training window of the graph's corpus is a slice of `tokens`, and its targets the slice moved by one.
void check_windows(const graph_spec& g, const std::vector<std::uint32_t>& tokens) {
  token_corpus c(open_data_source(g), g.model.context, g.data.val_fraction, g.data.seed);
  token_batch b;
  c.next_train(8, b);
  const int T = g.model.context;
  for (int r = 0; r < 8; ++r) {
    auto got = row(b.tokens, r, T);
    bool found = false;
    for (std::size_t at = 0; at + T < tokens.size() && !found; at += static_cast<std::size_t>(T))
      found = std::equal(got.begin(), got.end(), tokens.begin() + static_cast<std::ptrdiff_t>(at)) &&
              row(b.targets, r, T).back() == static_cast<std::int32_t>(tokens[at + static_cast<std::size_t>(T)]);
    CHECK(found);
  }
}

} // namespace

TEST_CASE("a uint16 and a uint32 token file, and llm.c's headered file, give the file's tokens") {
  testing::scratch_dir d{"sources"};
  auto tokens = some_tokens(5000, 300);
  write_tokens<std::uint16_t>(d.path / "a.bin", tokens);
  write_tokens<std::uint32_t>(d.path / "b.bin", tokens);
  write_tokens<std::uint16_t>(d.path / "c.bin", tokens, true);
  for (auto [file, dtype] : {std::pair{"a.bin", "uint16"}, {"b.bin", "uint32"}, {"c.bin", "uint16"}}) {
    CAPTURE(file);
    auto r = testing::load_data_graph(
      fmt::format("{{tokens: {}, dtype: {}, vocab: 300, batch: 2}}", (d.path / file).string(), dtype), d.path);
    INFO(to_string(r.errors));
    REQUIRE(r.ok());
    CHECK(r.graph->data.source == "tokens");
    check_windows(*r.graph, tokens);
  }
}

TEST_CASE("documents end after the end-of-text id of a token file") {
  testing::scratch_dir d{"sources"};
  write_tokens<std::uint16_t>(d.path / "a.bin", some_tokens(5000, 299, 299)); // 299 only as the end of text
  auto r = testing::load_data_graph(
    fmt::format("{{tokens: {}, eot: 299, documents: eot, batch: 2}}", (d.path / "a.bin").string()), d.path);
  INFO(to_string(r.errors));
  REQUIRE(r.ok());
  token_corpus c(open_data_source(*r.graph), 16, 0.1, 1);
  c.set_documents(document_source::eot);
  REQUIRE(c.document_starts().size() == 100);
  CHECK(c.document_starts()[1] == 50);
}

TEST_CASE("bad token files are refused at their key, naming the file and what is wrong") {
  testing::scratch_dir d{"sources"};
  std::ofstream(d.path / "empty.bin");
  std::ofstream(d.path / "odd.bin") << "abcde";
  auto tokens = some_tokens(5000, 256);
  tokens[1234] = 400;
  write_tokens<std::uint16_t>(d.path / "bad.bin", tokens);
  write_tokens<std::uint16_t>(d.path / "good.bin", some_tokens(5000, 256));
  struct bad_case {
    std::string data, key, message;
  };
  for (const auto& c : std::vector<bad_case>{
         {"{tokens: empty.bin, batch: 2}", "data.tokens", "token file 'empty.bin' is empty"},
         {"{tokens: odd.bin, batch: 2}", "data.tokens",
          "token file 'odd.bin' holds 5 bytes of tokens, not a multiple of 2"},
         {"{tokens: bad.bin, vocab: 256, batch: 2}", "data.tokens",
          "token file 'bad.bin': token 400 at index 1234 (byte 2468) is not below data.vocab 256"},
         {"{tokens: bad.bin, vocab: 512, batch: 2}", "data.vocab", "does not fit model.vocab 300"},
         {"{tokens: bad.bin, dtype: uint32, batch: 2}", "data.tokens",
          "at index 0 (byte 0) is not below model.vocab 300"},
         {"{tokens: good.bin, eot: 300, batch: 2}", "data.eot", "end-of-text id 300 is not below model.vocab 300"},
         {"{tokens: good.bin, dtype: int8, batch: 2}", "data.dtype", "unknown dtype 'int8'"},
         {"{tokens: good.bin, field: text, batch: 2}", "data.field", "is a setting of data source 'jsonl'"},
         {"{tokens: ., batch: 2}", "data.tokens", "is a directory, not a token file"},
         {"{tokens: /dev/zero, batch: 2}", "data.tokens", "is a device or other special file"},
       }) {
    CAPTURE(c.data);
    auto r = testing::load_data_graph(c.data, d.path);
    REQUIRE(r.errors.size() == 1);
    CHECK(r.errors[0].path == c.key);
    CHECK(r.errors[0].pos.line == 2);
    CHECK(r.errors[0].message.find(c.message) != std::string::npos);
  }
}

// Not timed (speed belongs in benchmarks): the memory bound is what reading it whole would break.
TEST_CASE("a sparse 10 GB token file is checked without reading it: in little memory") {
  testing::scratch_dir d{"sources"};
  auto p = d.path / "huge.bin";
  std::ofstream(p).close();
  fs::resize_file(p, std::uintmax_t{10} << 30); // truncate: a hole, no blocks on disk
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  auto r = testing::load_data_graph(fmt::format("{{tokens: {}, batch: 2}}", p.string()), d.path);
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  INFO(to_string(r.errors));
  CHECK(r.ok());                                         // zeros are token 0: a valid (if dull) file
  CHECK(after.ru_maxrss - before.ru_maxrss < 64 * 1024); // KiB: reading it whole would take 10 GB
  token_corpus c(open_data_source(*r.graph), 16, 0.1, 1);
  CHECK(c.tokens() == (std::size_t{5} << 30));
}

TEST_CASE("JSON lines give each record's text field, one document each, and a bad line is refused with its number") {
  testing::scratch_dir d{"sources"};
  std::ofstream(d.path / "a.jsonl") << "{\"text\": \"In the beginning God created the heaven and the earth.\", "
                                       "\"id\": 1}\n\n{\"id\": 2, \"text\": \"And the earth was without form.\"}\n";
  auto r = testing::load_data_graph(
    fmt::format("{{jsonl: {}, batch: 2, val_fraction: 0.5}}", (d.path / "a.jsonl").string()), d.path);
  INFO(to_string(r.errors));
  REQUIRE(r.ok());
  auto opened = open_data_source(*r.graph);
  std::string first = "In the beginning God created the heaven and the earth.";
  REQUIRE(opened.train->size() == first.size() + std::string{"And the earth was without form."}.size());
  std::vector<std::int32_t> head(first.size());
  opened.train->copy(0, head.size(), head.data());
  CHECK(std::equal(head.begin(), head.end(), first.begin()));
  CHECK(opened.train->document_starts(document_source::eot) == std::vector<std::size_t>{0, first.size()});

  std::ofstream(d.path / "b.jsonl") << "{\"text\": \"fine\"}\n{\"text\": 3}\n";
  std::ofstream(d.path / "c.jsonl") << "{\"text\": \"fine\"}\nnot json\n";
  std::ofstream(d.path / "e.jsonl");
  for (auto [file, message] : {std::pair{"b.jsonl", "line 2 has no text field 'text'"},
                               {"c.jsonl", "line 2 is not JSON"},
                               {"e.jsonl", "jsonl file 'e.jsonl' is empty"}}) {
    auto bad = testing::load_data_graph(fmt::format("{{jsonl: {}, batch: 2}}", file), d.path);
    REQUIRE(bad.errors.size() == 1);
    CHECK(bad.errors[0].path == "data.jsonl");
    CHECK(bad.errors[0].message.find(message) != std::string::npos);
  }
}
