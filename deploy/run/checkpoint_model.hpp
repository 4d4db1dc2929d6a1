// A whole model put together from a checkpoint's stage parts, for the commands
// that use trained weights outside a run (`troupe export`, `troupe sample`).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "ops/gpt.hpp"
#include "runtime/checkpoint/checkpoint.hpp"

namespace troupe {

/// Every layer of a checkpoint's model on the CPU, with the weights it saved.
struct checkpoint_model {
  resume_point from;                     ///< the step folder it was read from
  ops::gpt_config config;                ///< the model's shape, from the parts' metadata
  std::string source_part;               ///< the part the embeddings came from (the first in actor-name order)
  std::unique_ptr<ops::gpt_range> model; ///< layers [0, layers), embeddings and head included
  /// The SentencePiece model the run tokenized its text with (serialized, from
  /// the data loader's part); empty: a byte-level run or a token file's.
  std::string tokenizer_model;

  /// The logits of i32 tokens [B, T] (T ≤ context): f32 [B, T, vocab]. Throws
  /// std::invalid_argument on bad shapes or token ids, as the model does.
  tensor_handle logits(const tensor_handle& tokens) const;
};

/// Reads the checkpoint `dir` names (DIR/latest or a step folder, as
/// `--resume` takes it) and gathers each parameter from its stage parts: the
/// part of the first actor in name order that holds it, so replica 0 of a
/// data-parallel run (replicas agree after every step, or after every outer
/// step with local updates). The error (errc::invalid_argument) names the file
/// and what is missing or inconsistent: no stage parts, parts of different
/// models, a parameter no part holds, one with the wrong shape.
caf::expected<checkpoint_model> load_checkpoint_model(const std::filesystem::path& dir);

} // namespace troupe
