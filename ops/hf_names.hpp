// Each model family's parameters under Hugging Face's names and layouts: one
// table per family, read in both directions (`troupe export --names hf` writes
// by it, `train.init: FILE.safetensors` reads by it), so a mapping is written once.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ops/gpt.hpp"
#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// How one troupe parameter is stored in a Hugging Face file. `{}` in both
/// names stands for the block index (`h.{}.ln_1.weight`).
struct hf_tensor_rule {
  std::string_view troupe;
  std::string_view hf;
  bool transposed = false; ///< stored [in, out] (GPT-2's Conv1D), where troupe's Linear keeps [out, in]
};

/// A config.json key that carries one number of the model's shape.
struct hf_shape_key {
  std::string_view hf;    ///< `n_layer`
  std::string_view graph; ///< `model.layers`, the graph key it must equal
  int gpt_config::*field;
};

/// One family's names, layouts and config keys (gpt2, llama); a new family is
/// one more of these in hf_names.cpp.
struct hf_family {
  std::string_view family;       ///< troupe's model family: `gpt2`
  std::string_view architecture; ///< transformers' class: `GPT2LMHeadModel`
  /// The base model's prefix, which some files leave out (`transformer.`):
  /// a reader accepts names with or without it.
  std::string_view base_prefix;
  std::span<const hf_tensor_rule> tensors;
  /// The head's troupe name, taken from the embedding's (`tied_to`) when a
  /// file has none: transformers leaves a tied head out.
  std::string_view head;
  std::string_view tied_to;
  std::span<const hf_shape_key> shape_keys;
  /// config.json's other keys (activation, norm epsilon, dtype).
  nlohmann::json (*other_config)(const gpt_config&);
};

/// The family called `name`, or nullptr.
const hf_family* find_hf_family(std::string_view name);
/// The names find_hf_family knows, for an error message: `gpt2`.
std::string hf_family_names();

/// A troupe parameter's name and layout in `f`'s files.
struct hf_tensor {
  std::string name;
  bool transposed = false;
};
/// `troupe_name` (`h.3.attn.c_attn.weight`) under `f`'s names
/// (`transformer.h.3.attn.c_attn.weight`, transposed); nullopt when no rule matches.
std::optional<hf_tensor> hf_tensor_of(const hf_family& f, std::string_view troupe_name);

/// The name of `f`'s first per-block tensor, `{}` for the block index
/// (`transformer.h.{}.ln_1.weight`): what counting a file's blocks looks for.
std::string_view hf_block_pattern(const hf_family& f);

/// The block count a file's names show: one more than the largest block index
/// of hf_block_pattern among `names`, with or without the base prefix (0 when none).
int hf_block_count(const hf_family& f, std::span<const std::string> names);

/// Key `k`'s number in `c`, llama's defaults (kv_heads = heads, ffn_hidden's rule) filled in.
int hf_shape_value(const gpt_config& c, const hf_shape_key& k);

/// config.json for a model of shape `c`: the architecture, the shape keys and the family's others.
nlohmann::json hf_config(const hf_family& f, const gpt_config& c);

/// A [rows, cols] f32 tensor as a new [cols, rows] one (the kernels' transpose).
tensor_handle transposed(const tensor_handle& t);

} // namespace troupe::ops
