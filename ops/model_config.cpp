// gpt_config from a graph's `model:` section.
#include "ops/model_config.hpp"

namespace troupe::ops {

gpt_config model_config(const graph_spec& g) {
  const auto& m = g.model;
  gpt_config c;
  c.layers = m.layers, c.d_model = m.d_model, c.heads = m.heads, c.context = m.context, c.vocab = m.vocab;
  c.precision = m.precision == dtype::bf16 ? precision::bf16 : precision::f32;
  c.seed = g.data.seed;
  c.head_apart = g.skip_runs();
  c.family = m.family == "llama" ? model_family::llama : model_family::gpt2;
  c.kv_heads = m.kv_heads, c.ffn_hidden = m.ffn_hidden, c.rope_theta = m.rope_theta;
  c.tie_embeddings = m.tie_embeddings, c.norm_eps = static_cast<float>(m.norm_eps);
  return c;
}

} // namespace troupe::ops
