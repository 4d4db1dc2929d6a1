// The model a graph describes, as the ops' gpt_config: one place that reads every
// `model:` key (and what else shapes the model: the data seed, SkipPipe's head).
#pragma once

#include "ops/gpt.hpp"
#include "runtime/graph/graph_spec.hpp"

namespace troupe::ops {

/// gpt_config of `g`: the model's shape and family, precision, seed (data.seed) and
/// head_apart (SkipPipe runs, graph_spec::skip_runs).
gpt_config model_config(const graph_spec& g);

} // namespace troupe::ops
