// Byte and SentencePiece tokenizers for text data sources, and the cache of a
// SentencePiece model trained on the corpus (keyed by the hash of the corpus
// bytes and the training settings, so a second run reuses it).
#include "actors/data/tokenizer.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

#include <fmt/format.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "actors/data/mapped_file.hpp"
#include "runtime/graph/graph_spec.hpp"

namespace troupe {

namespace {

class byte_level final : public tokenizer {
public:
  int vocab() const override { return 256; }
  void encode(std::string_view text, std::vector<std::int32_t>& out) const override {
    for (unsigned char c : text)
      out.push_back(c);
  }
  std::string decode(std::span<const std::int32_t> ids) const override {
    std::string out;
    for (auto id : ids)
      out.push_back(static_cast<char>(id));
    return out;
  }
  std::string piece(std::int32_t id) const override { return std::string(1, static_cast<char>(id)); }
};

class sp_tokenizer final : public tokenizer {
public:
  explicit sp_tokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> p) : sp_(std::move(p)) {}
  int vocab() const override { return sp_->GetPieceSize(); }
  void encode(std::string_view text, std::vector<std::int32_t>& out) const override {
    std::vector<int> ids;
    if (auto st = sp_->Encode(text, &ids); !st.ok())
      throw std::runtime_error(fmt::format("SentencePiece cannot encode the text: {}", st.ToString()));
    out.insert(out.end(), ids.begin(), ids.end());
  }
  std::string decode(std::span<const std::int32_t> ids) const override {
    std::string text;
    if (auto st = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text); !st.ok())
      throw std::runtime_error(fmt::format("SentencePiece cannot decode the tokens: {}", st.ToString()));
    return text;
  }
  std::string piece(std::int32_t id) const override { return sp_->IdToPiece(id); }
  std::string model() const override { return sp_->serialized_model_proto(); }

private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

const std::string* option(const graph_spec& g, const std::string& key) {
  auto it = g.data.options.find(key);
  return it == g.data.options.end() ? nullptr : &it->second;
}

std::string train_type(const graph_spec& g) {
  const auto* t = option(g, "tokenizer.train.type");
  return t ? *t : "bpe";
}

/// Loads a model file; the SentencePiece status text on failure.
std::unique_ptr<sentencepiece::SentencePieceProcessor> load_model(const std::filesystem::path& file, std::string& why) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  if (std::error_code ec; !std::filesystem::is_regular_file(file, ec)) {
    why = std::filesystem::exists(file, ec) ? "not a regular file" : "no such file";
    return nullptr;
  }
  if (auto st = sp->Load(file.string()); !st.ok()) {
    why = st.ToString();
    why.erase(why.find_last_not_of(" \n") + 1);
    return nullptr;
  }
  return sp;
}

/// FNV-1a over the data file's bytes and the training settings.
std::uint64_t training_hash(const graph_spec& g) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](std::span<const std::uint8_t> bytes) {
    for (auto b : bytes)
      h = (h ^ b) * 0x100000001b3ull;
  };
  mapped_file f(g.data.corpus_path);
  f.for_each_data(0, [&](std::size_t, std::span<const std::uint8_t> piece) { return mix(piece), true; });
  auto settings = fmt::format("{} {} {} {} {}", g.data.source, f.size(), *option(g, "tokenizer.train.vocab"),
                              train_type(g), option(g, "field") ? *option(g, "field") : "");
  mix({reinterpret_cast<const std::uint8_t*>(settings.data()), settings.size()});
  return h;
}

/// Feeds SentencePiece's trainer the corpus line by line.
class line_iterator final : public sentencepiece::SentenceIterator {
public:
  explicit line_iterator(const text_pieces& pieces) {
    pieces([&](std::string_view text) {
      for (std::size_t at = 0; at < text.size();) {
        auto end = std::min(text.find('\n', at), text.size());
        if (end > at)
          lines_.emplace_back(text.substr(at, end - at));
        at = end + 1;
      }
    });
  }
  bool done() const override { return i_ >= lines_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return lines_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

private:
  std::vector<std::string> lines_;
  std::size_t i_ = 0;
};

} // namespace

std::vector<option_spec> tokenizer_options() {
  auto vocab = int_setting_spec("tokenizer.train.vocab",
                                "train a SentencePiece model of this many pieces on the corpus (once: it is cached)", 0,
                                2, 1 << 20);
  auto type = choice_setting_spec("tokenizer.train.type", "the SentencePiece model type to train", {"bpe", "unigram"});
  vocab.fallback.clear(), type.fallback.clear(); // absent: bytes, and a graph's expanded form stays as written
  return {file_setting_spec("tokenizer.model", "a SentencePiece model file (.model) that tokenizes the text"), vocab,
          type,
          file_setting_spec("tokenizer.cache", "the folder a trained model is cached in (default: beside the corpus)")};
}

bool uses_sentencepiece(const graph_spec& g) {
  return option(g, "tokenizer.model") || option(g, "tokenizer.train.vocab");
}

void check_tokenizer(const graph_spec& g, diagnostics& out) {
  const auto* model = option(g, "tokenizer.model");
  const auto* train = option(g, "tokenizer.train.vocab");
  bool trains = train != nullptr;
  const int vocab = g.model.vocab;
  if (model && trains) {
    out.push_back(
      {g.where("data.tokenizer"), "data.tokenizer", "give either 'model: FILE' or 'train: {vocab: N}', not both"});
    return;
  }
  if (model) {
    std::string why;
    auto sp = load_model(*model, why);
    if (!sp)
      out.push_back({g.where("data.tokenizer.model"), "data.tokenizer.model",
                     fmt::format("tokenizer model '{}' does not load: {}", *model, why)});
    else if (sp->GetPieceSize() > vocab)
      out.push_back({g.where("data.tokenizer.model"), "data.tokenizer.model",
                     fmt::format("tokenizer model '{}' has {} pieces, more than model.vocab {}: raise model.vocab to "
                                 "at least {}",
                                 *model, sp->GetPieceSize(), vocab, sp->GetPieceSize())});
  } else if (trains) {
    if (std::stoi(*train) > vocab)
      out.push_back({g.where("data.tokenizer.train.vocab"), "data.tokenizer.train.vocab",
                     fmt::format("a tokenizer of {} pieces does not fit model.vocab {}", *train, vocab)});
  } else if (vocab < 256) {
    out.push_back({g.where("model.vocab"), "model.vocab",
                   fmt::format("vocab {} is too small for the byte-level corpus '{}': its tokens are bytes 0 to 255, "
                               "so vocab must be at least 256",
                               vocab, g.data.corpus)});
  }
}

std::filesystem::path trained_model_path(const graph_spec& g) {
  const auto* cache = option(g, "tokenizer.cache");
  auto dir = cache ? std::filesystem::path{*cache} : g.data.corpus_path.parent_path();
  return dir / fmt::format("{}.spm-{:016x}.model", g.data.corpus_path.filename().string(), training_hash(g));
}

std::unique_ptr<tokenizer> make_tokenizer(const graph_spec& g, const text_pieces& pieces) {
  if (!uses_sentencepiece(g))
    return std::make_unique<byte_level>();
  std::filesystem::path file;
  if (const auto* model = option(g, "tokenizer.model")) {
    file = *model;
  } else {
    file = trained_model_path(g);
    if (std::error_code ec; !std::filesystem::is_regular_file(file, ec)) {
      line_iterator lines(pieces);
      std::string proto;
      // One thread and the input in its order: the same corpus and settings give the same model.
      auto args = fmt::format("--vocab_size={} --model_type={} --num_threads=1 --shuffle_input_sentence=false "
                              "--character_coverage=1.0 --minloglevel=2",
                              *option(g, "tokenizer.train.vocab"), train_type(g));
      if (auto st = sentencepiece::SentencePieceTrainer::Train(args, &lines, &proto); !st.ok())
        throw std::runtime_error(
          fmt::format("{}: training a SentencePiece tokenizer failed: {}", g.data.corpus_path.string(), st.ToString()));
      auto tmp = file;
      tmp += fmt::format(".{}.tmp", ::getpid());
      if (!(std::ofstream(tmp, std::ios::binary) << proto))
        throw std::runtime_error(fmt::format("{}: cannot cache the trained tokenizer", tmp.string()));
      std::filesystem::rename(tmp, file, ec); // atomic: a concurrent run reads a whole model or none
      if (ec)
        throw std::runtime_error(
          fmt::format("{}: cannot cache the trained tokenizer: {}", file.string(), ec.message()));
    }
  }
  std::string why;
  auto sp = load_model(file, why);
  if (!sp)
    throw std::runtime_error(fmt::format("tokenizer model '{}' does not load: {}", file.string(), why));
  return std::make_unique<sp_tokenizer>(std::move(sp));
}

std::unique_ptr<tokenizer> byte_tokenizer() {
  return std::make_unique<byte_level>();
}

std::unique_ptr<tokenizer> sentencepiece_tokenizer(std::string_view model) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  if (auto st = sp->LoadFromSerializedProto(model); !st.ok())
    throw std::runtime_error(fmt::format("the SentencePiece model does not load: {}", st.ToString()));
  return std::make_unique<sp_tokenizer>(std::move(sp));
}

} // namespace troupe
