// Reading a model's parameters from a Hugging Face safetensors file: every
// wanted tensor located and checked from the header first, so a file that
// does not fit changes nothing and says which tensor or config key is wrong.
#include "ops/hf_import.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"

namespace fs = std::filesystem;

namespace troupe::ops {

namespace {

/// A wanted parameter and the file's tensor that holds it.
struct located {
  std::string troupe;
  const tensor_entry* at = nullptr;
  bool transposed = false;
};

/// The names `hf` may have in a file: as the table writes it, then without the base prefix.
std::vector<std::string> spellings(const hf_family& f, const std::string& hf) {
  std::vector<std::string> out{hf};
  if (hf.starts_with(f.base_prefix))
    out.push_back(hf.substr(f.base_prefix.size()));
  return out;
}

const tensor_entry* find_any(const safetensors_header& h, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (const auto* e = h.find(n))
      return e;
  return nullptr;
}

/// config.json beside the file, when there is one: its shape keys against `cfg`'s.
std::optional<std::string> check_config(const hf_family& f, const gpt_config& cfg, const fs::path& file) {
  auto path = file.parent_path() / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return std::nullopt;
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(std::ifstream(path));
  } catch (const nlohmann::json::exception& e) {
    return fmt::format("{}: not JSON: {}", path.string(), e.what());
  }
  if (!config.is_object())
    return fmt::format("{}: not a JSON object", path.string());
  auto names_it = [&](const nlohmann::json& v) { return v.is_string() && v.get<std::string>() == f.architecture; };
  if (auto arch = config.find("architectures");
      arch != config.end() && arch->is_array() && !arch->empty() && std::none_of(arch->begin(), arch->end(), names_it))
    return fmt::format("{}: architectures is {}, not {} (the {} family)", path.string(), arch->dump(), f.architecture,
                       f.family);
  for (const auto& k : f.shape_keys) {
    auto v = config.find(std::string{k.hf});
    if (v == config.end())
      continue;
    if (!v->is_number_integer() || v->get<long long>() != hf_shape_value(cfg, k))
      return fmt::format("{}: {} is {}, but the graph's {} is {}", path.string(), k.hf, v->dump(), k.graph,
                         hf_shape_value(cfg, k));
  }
  return std::nullopt;
}

/// Finds every wanted tensor in `h` and checks its dtype and shape.
std::optional<std::string> locate(const hf_family& f, const gpt_config& cfg, std::span<const gpt_param_spec> want,
                                  const safetensors_header& h, std::vector<located>& out) {
  std::vector<std::string> names;
  for (const auto& t : h.tensors)
    names.push_back(t.name);
  if (auto blocks = hf_block_count(f, names); blocks != cfg.layers)
    return fmt::format("the file holds {} blocks of a {} model ({} named like '{}'), but the graph's model.layers is "
                       "{}",
                       blocks, f.architecture, blocks == 0 ? "no tensors" : "tensors", hf_block_pattern(f), cfg.layers);
  for (const auto& p : want) {
    auto hf = hf_tensor_of(f, p.name);
    if (!hf)
      return fmt::format("troupe's parameter '{}' has no name in the {} table", p.name, f.family);
    auto names_of = spellings(f, hf->name);
    const auto* e = find_any(h, names_of);
    // A tied head: transformers writes the embedding alone; and a tied model's
    // head (a stage's copy, ops/gpt_init.cpp) is the embedding even where the file
    // has a head of its own, so both copies start equal.
    if ((!e || cfg.tie_embeddings) && p.name == f.head)
      if (const auto* tied = find_any(h, spellings(f, hf_tensor_of(f, f.tied_to)->name)); tied || !e)
        e = tied;
    if (!e)
      return fmt::format("the file has no tensor '{}'{} (troupe's '{}')", names_of.front(),
                         names_of.size() > 1 ? fmt::format(" nor '{}'", names_of.back()) : std::string{}, p.name);
    if (e->type != dtype::f32 && e->type != dtype::bf16 && e->type != dtype::f16)
      return fmt::format("tensor '{}' is {}; weights must be F32, BF16 or F16", e->name, to_string(e->type));
    auto need = p.shape;
    if (hf->transposed)
      need = shape_t{p.shape[1], p.shape[0]};
    if (!(e->shape == need))
      return fmt::format("tensor '{}' is {}, but the graph's model needs {}{} (model.d_model {}, model.vocab {}, "
                         "model.context {})",
                         e->name, to_string(e->shape), to_string(need), hf->transposed ? ", stored [in, out]" : "",
                         cfg.d_model, cfg.vocab, cfg.context);
    out.push_back({p.name, e, hf->transposed});
  }
  return std::nullopt;
}

/// IEEE half to float, exactly (subnormals, infinities and NaN included).
float half_to_float(std::uint16_t h) {
  std::uint32_t sign = std::uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits = 0;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else { // subnormal: normalise
    int e = -1;
    do {
      man <<= 1, ++e;
    } while (!(man & 0x400));
    bits = sign | (std::uint32_t(112 - e) << 23) | ((man & 0x3ff) << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

/// `t` as f32: BF16 is the high half of an f32, F16 widens exactly.
tensor_handle widened(const tensor_handle& t) {
  if (t.type() == dtype::f32)
    return t;
  auto out = tensor_handle::empty(t.shape());
  const auto* in = static_cast<const std::uint16_t*>(t.raw());
  auto* o = out.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (t.type() == dtype::bf16) {
      std::uint32_t bits = std::uint32_t(in[i]) << 16;
      std::memcpy(&o[i], &bits, sizeof bits);
    } else {
      o[i] = half_to_float(in[i]);
    }
  }
  return out;
}

} // namespace

std::optional<std::string> check_hf_weights(const hf_family& f, const gpt_config& cfg,
                                            std::span<const gpt_param_spec> want, const fs::path& file) {
  auto h = read_safetensors_header(file);
  if (!h)
    return error_message(h.error());
  std::vector<located> found;
  if (auto why = locate(f, cfg, want, *h, found))
    return fmt::format("{}: {}", file.string(), *why);
  return check_config(f, cfg, file);
}

caf::expected<std::vector<named_handle>> read_hf_weights(const hf_family& f, const gpt_config& cfg,
                                                         std::span<const gpt_param_spec> want, const fs::path& file) {
  if (auto why = check_hf_weights(f, cfg, want, file))
    return make_error(errc::invalid_argument, *why);
  auto all = read_safetensors(file);
  if (!all)
    return all.error();
  auto header = header_of(*all);
  std::vector<located> found;
  if (auto why = locate(f, cfg, want, header, found)) // the file changed since the check
    return make_error(errc::invalid_argument, fmt::format("{}: {}", file.string(), *why));
  std::vector<named_handle> out;
  for (const auto& l : found) {
    auto value = widened(all->find(l.at->name));
    out.push_back({l.troupe, l.transposed ? transposed(value) : value});
  }
  return out;
}

} // namespace troupe::ops
