// GPT parameters: names, shapes and GPT-2 initialisation from a per-parameter seed,
// so any layer range draws exactly the weights the whole model draws.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include <fmt/format.h>

#include "ops/gpt_impl.hpp"
#include "runtime/tensor/random.hpp"

namespace troupe::ops {

namespace {

std::uint64_t name_hash(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ull; // FNV-1a
  for (char ch : name)
    h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
  return h;
}

/// Fills `t` with normal(0, stddev) from a stream seeded by (seed, name): Box-Muller.
void fill_normal(tensor_handle& t, std::uint64_t seed, std::string_view name, double stddev) {
  std::uint64_t state = seed ^ name_hash(name);
  splitmix64(state);
  float* x = t.data<float>();
  const long n = t.numel();
  for (long i = 0; i < n; i += 2) {
    double u1 = (double(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53; // (0, 1]
    double u2 = double(splitmix64(state) >> 11) * 0x1.0p-53;
    double r = std::sqrt(-2.0 * std::log(u1)) * stddev;
    x[i] = float(r * std::cos(2.0 * std::numbers::pi * u2));
    if (i + 1 < n)
      x[i + 1] = float(r * std::sin(2.0 * std::numbers::pi * u2));
  }
}

void fill_value(tensor_handle& t, float v) {
  float* x = t.data<float>();
  for (long i = 0; i < t.numel(); ++i)
    x[i] = v;
}

} // namespace

namespace {

/// Llama's parameters: Hugging Face LlamaForCausalLM's names without the "model."
/// prefix (as GPT-2's are GPT2LMHeadModel's without "transformer."), weights [out, in]:
///   embed_tokens.weight                       [vocab, C]   (first range)
///   layers.{i}.input_layernorm.weight         [C]          RMSNorm before attention
///   layers.{i}.self_attn.{q,k,v}_proj.weight  [C | KV, C]  KV = kv_heads · C/heads
///   layers.{i}.self_attn.o_proj.weight        [C, C]
///   layers.{i}.post_attention_layernorm.weight [C]         RMSNorm before the MLP
///   layers.{i}.mlp.{gate,up}_proj.weight      [H, C]       H = ffn_hidden
///   layers.{i}.mlp.down_proj.weight           [C, H]
///   norm.weight                               [C]          (last range)
///   lm_head.weight                            [vocab, C]   (last range; tied: a copy of
///                                                           the embedding when the range lacks it)
/// The rotary layout is HF's "rotate half", so q and k weights need no permutation.
/// Initialised as GPT-2's: normal 0.02, norms 1, the residual projections (o, down)
/// scaled by 1/√(2·layers).
void llama_specs(const gpt_config& cfg, int begin, int end, std::vector<gpt_param_spec>& out) {
  const std::int64_t c = cfg.d_model, kv = std::int64_t(kv_heads_of(cfg)) * (c / cfg.heads), h = ffn_hidden_of(cfg);
  const double std0 = 0.02, std_resid = 0.02 / std::sqrt(2.0 * cfg.layers);
  auto add = [&](std::string name, shape_t shape, double stddev, float fill) {
    out.push_back({std::move(name), shape, stddev, fill});
  };
  if (begin == 0)
    add("embed_tokens.weight", {cfg.vocab, c}, std0, 0);
  for (int l = begin; l < end; ++l) { // in llama_slot order
    auto n = [&](const char* suffix) { return fmt::format("layers.{}.{}", l, suffix); };
    add(n("input_layernorm.weight"), {c}, 0, 1.0f);
    add(n("self_attn.q_proj.weight"), {c, c}, std0, 0);
    add(n("self_attn.k_proj.weight"), {kv, c}, std0, 0);
    add(n("self_attn.v_proj.weight"), {kv, c}, std0, 0);
    add(n("self_attn.o_proj.weight"), {c, c}, std_resid, 0);
    add(n("post_attention_layernorm.weight"), {c}, 0, 1.0f);
    add(n("mlp.gate_proj.weight"), {h, c}, std0, 0);
    add(n("mlp.up_proj.weight"), {h, c}, std0, 0);
    add(n("mlp.down_proj.weight"), {c, h}, std_resid, 0);
  }
  if (holds_head(cfg, begin, end)) {
    add("norm.weight", {c}, 0, 1.0f);
    if (!cfg.tie_embeddings || begin != 0) // tied: a copy of the embedding, drawn as it (drawn_as)
      add("lm_head.weight", {cfg.vocab, c}, std0, 0);
  }
}

} // namespace

std::vector<gpt_param_spec> gpt_param_specs(const gpt_config& cfg, int begin, int end) {
  std::vector<gpt_param_spec> out;
  if (cfg.family == model_family::llama) {
    llama_specs(cfg, begin, end, out);
    return out;
  }
  const std::int64_t c = cfg.d_model;
  const double std0 = 0.02, std_resid = 0.02 / std::sqrt(2.0 * cfg.layers);
  auto add = [&](std::string name, shape_t shape, double stddev, float fill) {
    out.push_back({std::move(name), shape, stddev, fill});
  };
  if (begin == 0) {
    add("wte", {cfg.vocab, c}, std0, 0);
    add("wpe", {cfg.context, c}, std0, 0);
  }
  for (int l = begin; l < end; ++l) {
    auto n = [&](const char* suffix) { return fmt::format("h.{}.{}", l, suffix); };
    add(n("ln_1.weight"), {c}, 0, 1.0f);
    add(n("ln_1.bias"), {c}, 0, 0.0f);
    add(n("attn.c_attn.weight"), {3 * c, c}, std0, 0);
    add(n("attn.c_attn.bias"), {3 * c}, 0, 0.0f);
    add(n("attn.c_proj.weight"), {c, c}, std_resid, 0);
    add(n("attn.c_proj.bias"), {c}, 0, 0.0f);
    add(n("ln_2.weight"), {c}, 0, 1.0f);
    add(n("ln_2.bias"), {c}, 0, 0.0f);
    add(n("mlp.c_fc.weight"), {4 * c, c}, std0, 0);
    add(n("mlp.c_fc.bias"), {4 * c}, 0, 0.0f);
    add(n("mlp.c_proj.weight"), {c, 4 * c}, std_resid, 0);
    add(n("mlp.c_proj.bias"), {c}, 0, 0.0f);
  }
  if (holds_head(cfg, begin, end)) {
    add("ln_f.weight", {c}, 0, 1.0f);
    add("ln_f.bias", {c}, 0, 0.0f);
    add("lm_head.weight", {cfg.vocab, c}, std0, 0);
  }
  return out;
}

namespace {

/// Llama: the fused weight a block parameter is a row slice of, as (fused slot, first
/// row), or fused_slots for a parameter of its own. Slices follow llama_slot order.
std::pair<fused_slot, std::int64_t> fused_place(int slot, const gpt_config& cfg) {
  const std::int64_t c = cfg.d_model, kv = std::int64_t(kv_heads_of(cfg)) * (c / cfg.heads);
  switch (slot) {
  case q_w:
    return {fused_qkv, 0};
  case k_w:
    return {fused_qkv, c};
  case v_w:
    return {fused_qkv, c + kv};
  case gate_w:
    return {fused_gate_up, 0};
  case up_w:
    return {fused_gate_up, ffn_hidden_of(cfg)};
  default:
    return {fused_slots, 0};
  }
}

/// Calls make(index, fused tensor or nullptr, first row) for each of `specs`: the
/// tensor a parameter (or its gradient) is a slice of, for llama's fused weights.
template <class F>
void for_each_place(const gpt_range::impl& m, std::size_t count, std::vector<tensor_handle>& fused, F&& make) {
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t b = m.block_base(0), e = m.block_base(m.local_layers());
    if (m.llama() && i >= b && i < e) {
      const int li = int((i - b) / llama_slots), slot = int((i - b) % llama_slots);
      auto [f, row] = fused_place(slot, m.cfg);
      if (f != fused_slots) {
        make(i, &fused[std::size_t(li * fused_slots + f)], row);
        continue;
      }
    }
    make(i, nullptr, 0);
  }
}

/// The fused weights' shapes of a llama range, in fused's order.
std::vector<shape_t> fused_shapes(const gpt_range::impl& m) {
  const std::int64_t c = m.cfg.d_model, kv = std::int64_t(kv_heads_of(m.cfg)) * (c / m.cfg.heads),
                     h = ffn_hidden_of(m.cfg);
  std::vector<shape_t> out;
  for (int li = 0; m.llama() && li < m.local_layers(); ++li) {
    out.push_back({c + 2 * kv, c});
    out.push_back({2 * h, c});
  }
  return out;
}

/// The name whose random stream draws parameter `name`: its own, except that a
/// tied head's copy (on a range without the embedding) draws the embedding's
/// values, so the two copies start equal.
std::string_view drawn_as(const gpt_config& cfg, std::string_view name) {
  bool copy = cfg.family == model_family::llama && cfg.tie_embeddings && name == "lm_head.weight";
  return copy ? "embed_tokens.weight" : name;
}
} // namespace

void gpt_range::impl::init_params() {
  auto specs = gpt_param_specs(cfg, begin, end);
  for (const auto& s : fused_shapes(*this))
    fused.push_back(tensor_handle::empty(s));
  for_each_place(*this, specs.size(), fused, [&](std::size_t i, tensor_handle* f, std::int64_t row) {
    auto& p = specs[i];
    auto t = f ? f->slice(row, row + p.shape[0]) : tensor_handle::empty(p.shape);
    if (p.stddev > 0)
      fill_normal(t, cfg.seed, drawn_as(cfg, p.name), p.stddev);
    else
      fill_value(t, p.fill);
    params.push_back({std::move(p.name), t});
  });
  if (llama())
    rope = make_rope_table(cfg.rope_theta, cfg.d_model / cfg.heads, cfg.context);
  alloc_grads();
}

void gpt_range::impl::alloc_grads() {
  fused_grads.clear();
  for (const auto& s : fused_shapes(*this))
    fused_grads.push_back(tensor_handle::zeros(s));
  grads.resize(params.size());
  for_each_place(*this, params.size(), fused_grads, [&](std::size_t i, tensor_handle* f, std::int64_t row) {
    const auto& s = params[i].value.shape();
    grads[i] = {params[i].name, f ? f->slice(row, row + s[0]) : tensor_handle::zeros(s)};
  });
}

std::size_t gpt_range::cache_bytes(int batch, int seq) const {
  const auto& cfg = impl_->cfg;
  const std::size_t bt = std::size_t(batch) * std::size_t(seq), c = std::size_t(cfg.d_model);
  // Per block: x, ln1, qkv (3), att, x_mid, ln2, fc (4), act (4) = 16 BTC; 4 row
  // statistics; attention's per-head row statistics (lse).
  std::size_t per_block = 16 * bt * c + 4 * bt + bt * std::size_t(cfg.heads);
  if (impl_->llama()) { // x, ln1, qkv (3), att, x_mid, ln2 = 8 BTC; gate|up (2H), act (H); rstd 2, positions
    const std::size_t h = std::size_t(ffn_hidden_of(cfg));
    per_block = 8 * bt * c + 3 * bt * h + 3 * bt + bt * std::size_t(cfg.heads);
  }
  std::size_t floats = per_block * std::size_t(impl_->local_layers());
  if (impl_->last())
    floats += 2 * bt * c + 2 * bt + bt * std::size_t(cfg.vocab); // x, lnf, stats, dlogits
  if (impl_->first())
    floats += bt; // tokens
  return floats * 4;
}

double gpt_step_flops(const gpt_config& cfg, int batch, int seq) {
  const double c = cfg.d_model, t = seq;
  double per_token = cfg.layers * (24.0 * c * c + 4.0 * t * c) + 2.0 * c * cfg.vocab;
  if (cfg.family == model_family::llama) { // q, o: 2 c²; k, v: 2 c·kv; gate, up, down: 3 c·h; 2 flops each
    const double kv = double(kv_heads_of(cfg)) * (c / cfg.heads), h = ffn_hidden_of(cfg);
    per_token = cfg.layers * (2.0 * (2 * c * c + 2 * c * kv + 3 * c * h) + 4.0 * t * c) + 2.0 * c * cfg.vocab;
  }
  return 3.0 * per_token * double(batch) * t;
}

std::int64_t gpt_parameter_count(const gpt_config& cfg, int begin, int end) {
  std::int64_t n = 0;
  for (const auto& p : gpt_param_specs(cfg, begin, std::max(begin, end)))
    n += p.shape.numel();
  return n;
}

} // namespace troupe::ops
