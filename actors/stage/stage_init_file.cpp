// A pipeline stage's warm start from a Hugging Face weights file (`train.init:
// FILE.safetensors`): the parameters of its layer ranges, looked up by the
// family's table (ops/hf_names.hpp), as a part that load_weights takes.
#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "ops/hf_import.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe {

namespace {

/// The family's Hugging Face table: GPT2LMHeadModel, troupe's one family until
/// `model.family` chooses another.
const ops::hf_family& family_of(const graph_spec&) {
  return *ops::find_hf_family("gpt2");
}

std::vector<ops::gpt_param_spec> all_params(const std::vector<std::vector<ops::gpt_param_spec>>& chunks) {
  std::vector<ops::gpt_param_spec> out;
  for (const auto& c : chunks)
    out.insert(out.end(), c.begin(), c.end());
  return out;
}

} // namespace

ops::gpt_config stage_model_shape(const graph_spec& g) {
  ops::gpt_config cfg;
  cfg.layers = g.model.layers, cfg.d_model = g.model.d_model, cfg.heads = g.model.heads;
  cfg.context = g.model.context, cfg.vocab = g.model.vocab, cfg.head_apart = g.skip_runs();
  return cfg;
}

std::vector<std::vector<ops::gpt_param_spec>> stage_param_specs(const graph_spec& g, const actor_spec& a) {
  std::vector<std::vector<ops::gpt_param_spec>> out;
  for (auto r : a.layers)
    out.push_back(ops::gpt_param_specs(stage_model_shape(g), r.begin, r.end));
  return out;
}

std::optional<std::string> check_stage_init_file(const graph_spec& g, const actor_spec& a,
                                                 const std::filesystem::path& file) {
  return ops::check_hf_weights(family_of(g), stage_model_shape(g), all_params(stage_param_specs(g, a)), file);
}

caf::expected<safetensors_file> read_stage_init_file(const graph_spec& g, const actor_spec& a,
                                                     const std::filesystem::path& file) {
  auto chunks = stage_param_specs(g, a);
  auto tensors = ops::read_hf_weights(family_of(g), stage_model_shape(g), all_params(chunks), file);
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
