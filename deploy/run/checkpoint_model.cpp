#include "deploy/run/checkpoint_model.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "actors/data/tokenizer.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/checkpoint/safetensors.hpp"

namespace fs = std::filesystem;

namespace troupe {

namespace {

caf::error bad(const fs::path& at, const std::string& what) {
  return make_error(errc::invalid_argument, fmt::format("{}: {}", at.string(), what));
}

std::optional<int> whole(const std::map<std::string, std::string>& md, const std::string& key) {
  auto it = md.find(key);
  if (it == md.end())
    return std::nullopt;
  int v = 0;
  auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc{} || end != it->second.data() + it->second.size() || v <= 0)
    return std::nullopt;
  return v;
}

/// The model's shape as a stage part's metadata records it (checkpoint_identity).
caf::expected<ops::gpt_config> config_of(const fs::path& part, const std::map<std::string, std::string>& md) {
  ops::gpt_config c;
  for (auto [key, field] : {std::pair{"model.layers", &c.layers},
                            {"model.d_model", &c.d_model},
                            {"model.heads", &c.heads},
                            {"model.context", &c.context},
                            {"model.vocab", &c.vocab}}) {
    auto v = whole(md, key);
    if (!v)
      return bad(part, fmt::format("its metadata has no positive whole '{}'", key));
    *field = *v;
  }
  auto p = md.find("model.precision");
  c.precision = p != md.end() && p->second == "bf16" ? ops::precision::bf16 : ops::precision::f32;
  if (auto f = md.find("model.family"); f != md.end() && f->second == "llama") { // pipeline_stage's identity
    c.family = ops::model_family::llama;
    for (auto [key, field] : {std::pair{"model.kv_heads", &c.kv_heads}, {"model.ffn_hidden", &c.ffn_hidden}}) {
      auto v = whole(md, key);
      if (!v)
        return bad(part, fmt::format("its metadata has no positive whole '{}'", key));
      *field = *v;
    }
    auto number = [&](const char* key, double fallback) {
      auto it = md.find(key);
      return it == md.end() ? fallback : std::strtod(it->second.c_str(), nullptr);
    };
    c.rope_theta = number("model.rope_theta", c.rope_theta);
    c.norm_eps = float(number("model.norm_eps", c.norm_eps));
    auto t = md.find("model.tie_embeddings");
    c.tie_embeddings = t != md.end() && t->second == "true";
  }
  return c;
}

bool same_shape(const ops::gpt_config& a, const ops::gpt_config& b) {
  return a.layers == b.layers && a.d_model == b.d_model && a.heads == b.heads && a.context == b.context &&
         a.vocab == b.vocab && a.family == b.family && a.kv_heads == b.kv_heads && a.ffn_hidden == b.ffn_hidden &&
         a.tie_embeddings == b.tie_embeddings;
}

} // namespace

tensor_handle checkpoint_model::logits(const tensor_handle& tokens) const {
  return model->evaluate(tokens);
}

caf::expected<checkpoint_model> load_checkpoint_model(const fs::path& dir) {
  auto from = find_checkpoint(dir);
  if (!from)
    return from.error();
  std::vector<fs::path> parts;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(from->folder, ec))
    if (e.path().extension() == ".safetensors")
      parts.push_back(e.path());
  if (ec)
    return bad(from->folder, fmt::format("cannot list it: {}", ec.message()));
  std::sort(parts.begin(), parts.end()); // actor-name order: r0s1 before r1s0, s0 before s1
  checkpoint_model out;
  out.from = *from;
  std::map<std::string, std::pair<tensor_handle, fs::path>> found; // parameter -> first value and its part
  std::optional<fs::path> first;
  for (const auto& part : parts) {
    auto header = read_safetensors_header(part);
    if (!header)
      return header.error();
    if (!header->metadata.count("layers")) { // the loader's part, an optimizer shard's, an outer exchange's
      if (header->find(tokenizer_tensor) && out.tokenizer_model.empty()) {
        auto file = read_safetensors(part);
        if (!file)
          return file.error();
        auto bytes = file->find(tokenizer_tensor);
        out.tokenizer_model.assign(static_cast<const char*>(bytes.raw()), bytes.nbytes());
      }
      continue;
    }
    auto c = config_of(part, header->metadata);
    if (!c)
      return c.error();
    if (!first) {
      out.config = *c, first = part;
    } else if (!same_shape(out.config, *c)) {
      return bad(part, fmt::format("holds another model than {} (layers {} / {}, d_model {} / {})", first->string(),
                                   c->layers, out.config.layers, c->d_model, out.config.d_model));
    }
    auto file = read_safetensors(part);
    if (!file)
      return file.error();
    for (const auto& t : file->tensors)
      if (!t.name.starts_with("optimizer.") && !found.count(t.name))
        found.emplace(t.name, std::pair{t.value, part});
  }
  if (!first)
    return bad(out.from.folder, "holds no pipeline stage's part (no *.safetensors with a 'layers' entry)");
  out.source_part = first->filename().string();
  out.model = std::make_unique<ops::gpt_range>(out.config, 0, out.config.layers);
  std::vector<std::string> missing;
  for (const auto& p : out.model->params()) {
    auto it = found.find(p.name);
    if (it == found.end()) {
      missing.push_back(p.name);
      continue;
    }
    const auto& [value, part] = it->second;
    if (value.shape() != p.value.shape() || value.type() != p.value.type())
      return bad(part, fmt::format("'{}' is {} {}, while the model's is {} {}", p.name, to_string(value.type()),
                                   to_string(value.shape()), to_string(p.value.type()), to_string(p.value.shape())));
    std::copy_n(static_cast<const std::byte*>(value.raw()), value.nbytes(), static_cast<std::byte*>(p.value.raw()));
  }
  if (!missing.empty())
    return bad(out.from.folder, fmt::format("no stage part holds {} of the model's parameters (the first: {}); "
                                            "a checkpoint of part of a model cannot be used alone",
                                            missing.size(), missing.front()));
  return out;
}

} // namespace troupe
