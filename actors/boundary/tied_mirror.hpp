// Tied embeddings across stages under local update (#27): the head's copy of
// the tied matrix stays out of its stage's outer exchange and follows the
// embedding's, so each outer step of the matrix is taken once, by one sync actor.
#pragma once

#include <array>
#include <map>
#include <string_view>

#include "actors/boundary/step_boundary.hpp"
#include "actors/stage/pipeline_messages.hpp"

namespace troupe {

/// The part of a stage's outer exchange that keeps the tied copies equal. The
/// inner steps already do (both copies take the summed gradient,
/// tied_embeddings.cpp); after the outer steps of a step, the embedding's stage
/// sends the head's stage what they rewrote of the matrix (its values, and
/// under DES-LOC its AdamW moments), and the head's copy takes it bit for bit
/// before its next step. Every step with an outer step sends one message, empty
/// when none touched the matrix, so the head knows what to wait for from its
/// own schedule (the same on every stage). A stage that holds both copies
/// (V-shaped chunks) copies in place.
class tied_mirror {
public:
  /// What a stage holds: `embedding` and `copy` name its copies (empty: not
  /// here); `twin` is the other copy's stage (its own index when both are here).
  tied_mirror(stage_host& host, int twin, std::string_view embedding, std::string_view copy);

  /// Flat indices (chunk, then parameter order) of the copies here; -1: not here.
  int embedding() const noexcept { return embedding_.flat; }
  int copy() const noexcept { return copy_.flat; }

  /// Which of the matrix's contents (params, exp_avg, exp_avg_sq) a step's outer steps rewrote.
  using touched = std::array<bool, 3>;
  /// The embedding's stage, once the outer steps of `step` are applied: sends
  /// the head's stage what they rewrote (or copies it in place).
  void send(step_t step, const touched& t);
  /// The head's stage after an update of `step` with outer steps: true when
  /// their values must still be waited for (receive() says when they came).
  bool expect(step_t step);
  /// The embedding's values; true when they were the ones expect() waits for.
  bool receive(const tied_value_msg& m);

private:
  struct place {
    int chunk = -1;
    std::size_t param = 0;
    int flat = -1;
  };
  place find(std::string_view name) const;
  tensor_handle tensor(const place& p, int content) const;
  void apply(const tied_value_msg& m);

  stage_host& host_;
  int twin_;
  place embedding_, copy_;
  step_t due_ = -1;                          ///< the step whose values the head waits for
  std::map<step_t, tied_value_msg> arrived_; ///< values that came before their step's update here
};

} // namespace troupe
