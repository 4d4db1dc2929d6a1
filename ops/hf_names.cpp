// The Hugging Face tables of troupe's model families (GPT2LMHeadModel,
// LlamaForCausalLM), and
// matching a name against a rule's `{}` pattern in either direction.
#include "ops/hf_names.hpp"

#include <algorithm>
#include <array>
#include <charconv>

#include <fmt/format.h>

#include "kernels/cpu/small_gemm.hpp"

namespace troupe::ops {

namespace {

// transformers' modeling_gpt2.py: GPT2LMHeadModel = GPT2Model `transformer` + `lm_head`;
// Conv1D keeps its weight [in, out] (nx, nf), troupe's Linear [out, in].
constexpr std::array gpt2_tensors{
  hf_tensor_rule{"wte", "transformer.wte.weight"},
  hf_tensor_rule{"wpe", "transformer.wpe.weight"},
  hf_tensor_rule{"h.{}.ln_1.weight", "transformer.h.{}.ln_1.weight"},
  hf_tensor_rule{"h.{}.ln_1.bias", "transformer.h.{}.ln_1.bias"},
  hf_tensor_rule{"h.{}.attn.c_attn.weight", "transformer.h.{}.attn.c_attn.weight", true},
  hf_tensor_rule{"h.{}.attn.c_attn.bias", "transformer.h.{}.attn.c_attn.bias"},
  hf_tensor_rule{"h.{}.attn.c_proj.weight", "transformer.h.{}.attn.c_proj.weight", true},
  hf_tensor_rule{"h.{}.attn.c_proj.bias", "transformer.h.{}.attn.c_proj.bias"},
  hf_tensor_rule{"h.{}.ln_2.weight", "transformer.h.{}.ln_2.weight"},
  hf_tensor_rule{"h.{}.ln_2.bias", "transformer.h.{}.ln_2.bias"},
  hf_tensor_rule{"h.{}.mlp.c_fc.weight", "transformer.h.{}.mlp.c_fc.weight", true},
  hf_tensor_rule{"h.{}.mlp.c_fc.bias", "transformer.h.{}.mlp.c_fc.bias"},
  hf_tensor_rule{"h.{}.mlp.c_proj.weight", "transformer.h.{}.mlp.c_proj.weight", true},
  hf_tensor_rule{"h.{}.mlp.c_proj.bias", "transformer.h.{}.mlp.c_proj.bias"},
  hf_tensor_rule{"ln_f.weight", "transformer.ln_f.weight"},
  hf_tensor_rule{"ln_f.bias", "transformer.ln_f.bias"},
  hf_tensor_rule{"lm_head.weight", "lm_head.weight"},
};

constexpr std::array gpt2_shape{
  hf_shape_key{"n_layer", "model.layers", &gpt_config::layers},
  hf_shape_key{"n_embd", "model.d_model", &gpt_config::d_model},
  hf_shape_key{"n_head", "model.heads", &gpt_config::heads},
  hf_shape_key{"vocab_size", "model.vocab", &gpt_config::vocab},
  hf_shape_key{"n_positions", "model.context", &gpt_config::context},
};

nlohmann::json gpt2_other_config(const gpt_config& c) {
  return {{"model_type", "gpt2"},       {"n_ctx", c.context},
          {"n_inner", 4 * c.d_model},   {"activation_function", "gelu_new"}, // the tanh approximation (ops/gelu.hpp)
          {"layer_norm_epsilon", 1e-5}, {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},          {"attn_pdrop", 0.0},
          {"scale_attn_weights", true}, {"tie_word_embeddings", false}, // troupe trains its head apart
          {"torch_dtype", "float32"}};
}

// transformers' modeling_llama.py: LlamaForCausalLM = LlamaModel `model` + `lm_head`;
// every Linear keeps [out, in] as troupe does, and troupe's rotary positions use
// the same rotate-half layout, so q and k need no permutation.
constexpr std::array llama_tensors{
  hf_tensor_rule{"embed_tokens.weight", "model.embed_tokens.weight"},
  hf_tensor_rule{"layers.{}.input_layernorm.weight", "model.layers.{}.input_layernorm.weight"},
  hf_tensor_rule{"layers.{}.self_attn.q_proj.weight", "model.layers.{}.self_attn.q_proj.weight"},
  hf_tensor_rule{"layers.{}.self_attn.k_proj.weight", "model.layers.{}.self_attn.k_proj.weight"},
  hf_tensor_rule{"layers.{}.self_attn.v_proj.weight", "model.layers.{}.self_attn.v_proj.weight"},
  hf_tensor_rule{"layers.{}.self_attn.o_proj.weight", "model.layers.{}.self_attn.o_proj.weight"},
  hf_tensor_rule{"layers.{}.post_attention_layernorm.weight", "model.layers.{}.post_attention_layernorm.weight"},
  hf_tensor_rule{"layers.{}.mlp.gate_proj.weight", "model.layers.{}.mlp.gate_proj.weight"},
  hf_tensor_rule{"layers.{}.mlp.up_proj.weight", "model.layers.{}.mlp.up_proj.weight"},
  hf_tensor_rule{"layers.{}.mlp.down_proj.weight", "model.layers.{}.mlp.down_proj.weight"},
  hf_tensor_rule{"norm.weight", "model.norm.weight"},
  hf_tensor_rule{"lm_head.weight", "lm_head.weight"},
};

constexpr std::array llama_shape{
  hf_shape_key{"num_hidden_layers", "model.layers", &gpt_config::layers},
  hf_shape_key{"hidden_size", "model.d_model", &gpt_config::d_model},
  hf_shape_key{"num_attention_heads", "model.heads", &gpt_config::heads},
  hf_shape_key{"num_key_value_heads", "model.kv_heads", &gpt_config::kv_heads},
  hf_shape_key{"intermediate_size", "model.ffn_hidden", &gpt_config::ffn_hidden},
  hf_shape_key{"vocab_size", "model.vocab", &gpt_config::vocab},
  hf_shape_key{"max_position_embeddings", "model.context", &gpt_config::context},
};

nlohmann::json llama_other_config(const gpt_config& c) {
  return {{"model_type", "llama"},      {"hidden_act", "silu"},       {"head_dim", c.d_model / c.heads},
          {"rope_theta", c.rope_theta}, {"rms_norm_eps", c.norm_eps}, {"tie_word_embeddings", c.tie_embeddings},
          {"attention_bias", false},    {"mlp_bias", false},          {"torch_dtype", "float32"}};
}

const std::array families{
  hf_family{"gpt2", "GPT2LMHeadModel", "transformer.", gpt2_tensors, "lm_head.weight", "wte", gpt2_shape,
            gpt2_other_config},
  hf_family{"llama", "LlamaForCausalLM", "model.", llama_tensors, "lm_head.weight", "embed_tokens.weight", llama_shape,
            llama_other_config},
};

/// The block index `name` has under `pattern` (`{}` standing for it), or -1
/// when it does not match; a pattern without `{}` matches itself as 0.
int match(std::string_view pattern, std::string_view name) {
  auto hole = pattern.find("{}");
  if (hole == std::string_view::npos)
    return pattern == name ? 0 : -1;
  auto head = pattern.substr(0, hole), tail = pattern.substr(hole + 2);
  if (name.size() <= head.size() + tail.size() || !name.starts_with(head) || !name.ends_with(tail))
    return -1;
  auto digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  int v = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  return ec == std::errc{} && end == digits.data() + digits.size() ? v : -1;
}

std::string fill(std::string_view pattern, int block) {
  auto hole = pattern.find("{}");
  if (hole == std::string_view::npos)
    return std::string{pattern};
  return fmt::format("{}{}{}", pattern.substr(0, hole), block, pattern.substr(hole + 2));
}

} // namespace

const hf_family* find_hf_family(std::string_view name) {
  auto it = std::find_if(families.begin(), families.end(), [&](const hf_family& f) { return f.family == name; });
  return it == families.end() ? nullptr : &*it;
}

std::string hf_family_names() {
  std::string out;
  for (const auto& f : families)
    out += fmt::format("{}{}", out.empty() ? "" : ", ", f.family);
  return out;
}

std::optional<hf_tensor> hf_tensor_of(const hf_family& f, std::string_view troupe_name) {
  for (const auto& r : f.tensors)
    if (auto block = match(r.troupe, troupe_name); block >= 0)
      return hf_tensor{fill(r.hf, block), r.transposed};
  return std::nullopt;
}

std::string_view hf_block_pattern(const hf_family& f) {
  auto rule = std::find_if(f.tensors.begin(), f.tensors.end(),
                           [](const hf_tensor_rule& r) { return r.hf.find("{}") != std::string_view::npos; });
  return rule == f.tensors.end() ? std::string_view{} : rule->hf;
}

int hf_block_count(const hf_family& f, std::span<const std::string> names) {
  auto pattern = hf_block_pattern(f);
  if (pattern.empty())
    return 0;
  auto bare = pattern.starts_with(f.base_prefix) ? pattern.substr(f.base_prefix.size()) : pattern;
  int count = 0;
  for (const auto& n : names)
    count = std::max(count, 1 + std::max(match(pattern, n), match(bare, n)));
  return count;
}

int hf_shape_value(const gpt_config& c, const hf_shape_key& k) {
  auto full = c; // llama's 0s stand for their defaults
  if (full.kv_heads == 0)
    full.kv_heads = full.heads;
  if (full.ffn_hidden == 0)
    full.ffn_hidden = llama_ffn_hidden(full.d_model);
  return full.*k.field;
}

nlohmann::json hf_config(const hf_family& f, const gpt_config& c) {
  nlohmann::json out{{"architectures", {std::string{f.architecture}}}};
  for (const auto& k : f.shape_keys)
    out[std::string{k.hf}] = hf_shape_value(c, k);
  out.update(f.other_config(c));
  return out;
}

tensor_handle transposed(const tensor_handle& t) {
  auto rows = t.dim(0), cols = t.dim(1);
  auto out = tensor_handle::empty({cols, rows});
  kernels::cpu::transpose(t.data<float>(), rows, cols, cols, out.data<float>(), rows);
  return out;
}

} // namespace troupe::ops
