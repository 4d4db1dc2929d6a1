// A model's parameters read from a Hugging Face safetensors file (`train.init:
// FILE.safetensors`), by the family's table in ops/hf_names.hpp: names with or
// without the base model's prefix, a tied head taken from the embedding,
// Conv1D weights transposed, BF16 and F16 widened to f32.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "ops/gpt.hpp"
#include "ops/hf_names.hpp"
#include "runtime/checkpoint/safetensors.hpp"

namespace troupe::ops {

/// Checks, from its header and the config.json beside it (when there is one),
/// that `file` holds parameters `want` of a model shaped `cfg` under `f`'s
/// names: as many blocks as cfg.layers, each wanted tensor there with the shape
/// the model needs in the file's layout and a dtype of F32, BF16 or F16, and
/// config.json's shape keys equal to cfg's. What does not fit (a sentence
/// naming the tensor or the key and the graph key it differs from), or nullopt.
std::optional<std::string> check_hf_weights(const hf_family& f, const gpt_config& cfg,
                                            std::span<const gpt_param_spec> want, const std::filesystem::path& file);

/// Parameters `want` from `file`, after check_hf_weights: f32 tensors under
/// troupe's names and layouts, in `want`'s order. errc::invalid_argument with
/// the check's sentence, or the reader's error for a malformed file.
caf::expected<std::vector<named_handle>> read_hf_weights(const hf_family& f, const gpt_config& cfg,
                                                         std::span<const gpt_param_spec> want,
                                                         const std::filesystem::path& file);

} // namespace troupe::ops
