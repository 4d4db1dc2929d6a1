// A pipeline stage's warm start from a Hugging Face weights file (`train.init:
// FILE.safetensors`): the parameters of its layer ranges, looked up by the
// family's table (ops/hf_names.hpp), as a part that load_weights takes.
#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "ops/hf_import.hpp"
#include "ops/model_config.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe {

namespace {

/// The Hugging Face table of the graph's `model.family` (GPT2LMHeadModel, LlamaForCausalLM).
const ops::hf_family& family_of(const graph_spec& g) {
  return *ops::find_hf_family(ops::to_string(ops::model_config(g).family));
}

std::vector<ops::gpt_param_spec> all_params(const std::vector<std::vector<ops::gpt_param_spec>>& chunks) {
  std::vector<ops::gpt_param_spec> out;
  for (const auto& c : chunks)
    out.insert(out.end(), c.begin(), c.end());
  return out;
}

} // namespace

std::vector<std::vector<ops::gpt_param_spec>> stage_param_specs(const graph_spec& g, const actor_spec& a) {
  std::vector<std::vector<ops::gpt_param_spec>> out;
  for (auto r : a.layers)
    out.push_back(ops::gpt_param_specs(ops::model_config(g), r.begin, r.end));
  return out;
}

std::optional<std::string> check_stage_init_file(const graph_spec& g, const actor_spec& a,
                                                 const std::filesystem::path& file) {
  return ops::check_hf_weights(family_of(g), ops::model_config(g), all_params(stage_param_specs(g, a)), file);
}

caf::expected<safetensors_file> read_stage_init_file(const graph_spec& g, const actor_spec& a,
                                                     const std::filesystem::path& file) {
  auto chunks = stage_param_specs(g, a);
  auto tensors = ops::read_hf_weights(family_of(g), ops::model_config(g), all_params(chunks), file);
  if (!tensors)
    return tensors.error();
  safetensors_file part{std::move(*tensors), {}};
  std::string steps; // a part with no optimizer step yet: what load_weights checks
  for (std::size_t k = 0; k < chunks.size(); ++k)
    steps += k == 0 ? "0" : ",0";
  part.metadata["optimizer.steps"] = steps;
  return part;
}

} // namespace troupe
