// Verbs the pipeline actors add to runtime/actor/messages.hpp: evaluation traffic,
// the per-step gradient-norm reduction and an actor's own "run the next action".
#pragma once

#include <caf/atom.hpp>

namespace troupe {

/// `(eval_atom, batch_msg | activation_msg)`: a validation microbatch, forward only.
using eval_atom = caf::atom_constant<caf::atom("eval")>;
/// `(norm_atom, step_t step, double sq_norm, int32 from)`: a stage's Σ g² for
/// global-norm clipping, to the step's reducer (`from` is the sender's actor index).
using norm_atom = caf::atom_constant<caf::atom("gradnorm")>;
/// `(clip_atom, step_t step, double total_sq)`: the reducer's answer, the global Σ g².
using clip_atom = caf::atom_constant<caf::atom("gradtotal")>;
/// `(continue_atom)`: sent to itself by a stage that has more ready work.
using continue_atom = caf::atom_constant<caf::atom("continue")>;

/// `(hops_atom, step_t step, int32 from, int32 count)`: with routes chosen on
/// the way (least_loaded), stage `from` sent the receiver `count` microbatches
/// of `step`; a stage knows its step's work once every sender has said.
using hops_atom = caf::atom_constant<caf::atom("hops")>;

/// `(wake_atom)`: a stage's delayed reminder to ask its policy again.
using wake_atom = caf::atom_constant<caf::atom("wake")>;

/// Links a send span to its receive span in traces: unique per message
/// (`stage` is the receiver's virtual stage: rank + chunk · ranks).
constexpr std::uint64_t flow_id(std::int64_t step, int stage, int microbatch, int kind) {
  return ((static_cast<std::uint64_t>(step + 2) * 4096 + static_cast<std::uint64_t>(stage)) * 65536 +
          static_cast<std::uint64_t>(microbatch + 1)) *
           4 +
         static_cast<std::uint64_t>(kind) + 1;
}

} // namespace troupe
