// Verbs the pipeline actors add to runtime/actor/messages.hpp: evaluation traffic,
// the per-step gradient-norm reduction, an actor's own "run the next action", and
// the tied-embedding gradients two stages exchange (and, under local update,
// the tied matrix's new values after an outer step).
#pragma once

#include <string>

#include <caf/atom.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include "runtime/actor/messages.hpp"

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

/// `(tied_atom, tied_grad_msg)`: tied embeddings across stages
/// (actors/boundary/tied_embeddings.cpp): the stage holding the token embedding
/// and the one holding the head's copy of it each send the other their gradient
/// of the tied matrix for `step`, once the replicas' sum is in, and add the one
/// they receive.
using tied_atom = caf::atom_constant<caf::atom("tied")>;
struct tied_grad_msg {
  step_t step = 0;
  std::int32_t from = 0; ///< the sender's actor index
  tensor_handle grad;    ///< f32 [vocab, d_model], a copy the sender no longer touches
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tied_grad_msg& x) {
  return f(caf::meta::type_name("tied_grad_msg"), x.step, x.from, x.grad, caf::meta::load_callback([&] {
             return x.step >= 0 && x.from >= 0 && x.grad.defined() && x.grad.type() == dtype::f32 && x.grad.rank() == 2
                      ? caf::error{}
                      : make_error(errc::malformed_frame, "tied-embedding gradient of step " + std::to_string(x.step) +
                                                            " without f32 [vocab, d_model] values");
           }));
}

/// `(tied_atom, tied_value_msg)`: tied embeddings across stages under
/// local_update (actors/boundary/outer_exchange.cpp): after the outer steps of
/// `step` that rewrote the tied matrix or (DES-LOC) its AdamW moments, the
/// embedding's stage sends the head's stage their new values, which its copy
/// takes bit for bit before its next step. A field the step left alone is undefined.
struct tied_value_msg {
  step_t step = 0;
  std::int32_t from = 0;                     ///< the sender's actor index
  tensor_handle params, exp_avg, exp_avg_sq; ///< f32 [vocab, d_model] copies the sender no longer touches
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tied_value_msg& x) {
  return f(caf::meta::type_name("tied_value_msg"), x.step, x.from, x.params, x.exp_avg, x.exp_avg_sq,
           caf::meta::load_callback([&] {
             for (const auto* t : {&x.params, &x.exp_avg, &x.exp_avg_sq})
               if (t->defined() && (t->type() != dtype::f32 || t->rank() != 2))
                 return make_error(errc::malformed_frame, "tied-matrix values of step " + std::to_string(x.step) +
                                                            " not f32 [vocab, d_model]");
             return x.step >= 0 && x.from >= 0 ? caf::error{}
                                               : make_error(errc::malformed_frame, "tied-matrix values malformed");
           }));
}

/// Links a send span to its receive span in traces: unique per message
/// (`stage` is the receiver's virtual stage: rank + chunk · ranks).
constexpr std::uint64_t flow_id(std::int64_t step, int stage, int microbatch, int kind) {
  return ((static_cast<std::uint64_t>(step + 2) * 4096 + static_cast<std::uint64_t>(stage)) * 65536 +
          static_cast<std::uint64_t>(microbatch + 1)) *
           4 +
         static_cast<std::uint64_t>(kind) + 1;
}

} // namespace troupe
