// Every message type troupe actors exchange: verb atoms and noun payloads,
// declared once here and registered once in runtime/actor_system.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include "runtime/actor/errors.hpp"
#include "runtime/tensor/device_fence.hpp"
#include "runtime/actor/route.hpp"
#include "runtime/tensor/tensor_handle.hpp"

// ---------------------------------------------------------------------------
// The run protocol (runner = deploy/run/run_graph.cpp, or per node the node agent,
// both through deploy/cluster/spawn_and_connect.cpp for steps 1-2; every graph actor follows it)
//
//  1. The runner spawns each `actors:` entry through its registered factory,
//     giving it a spawn_context (runtime/actor/registry.hpp) that holds the runner's
//     handle. The runner monitors every actor it spawned.
//  2. The runner sends each actor `(connect_atom, connect_msg)`: the actor's
//     own name, one `peer` per channel touching it (name, handle, direction)
//     and the directory of every actor in the graph. The actor replies
//     `ok_atom` when it has stored them (a request with a timeout).
//  3. When all actors have answered, the runner sends each `start_atom`.
//     Actors that wait for input (stages downstream of the loader) just keep
//     waiting; sources (the data loader) begin producing.
//  4. Each actor, when its part of the run is over (it has finished
//     `train.steps` steps, or its upstream told it so), sends the runner
//     `(done_atom, run_summary)` exactly once, then may stay alive to serve
//     peers. Actors with nothing to summarise send a run_summary with just
//     `actor` set.
//  5. An actor that cannot go on sends `(failed_atom, failure_msg)` to the
//     runner. An actor that exits abnormally (exception, crash) is seen
//     through the monitor. Either makes the run fail with exit code 1, and the
//     runner shuts every actor down (exit reason user_shutdown).
//  6. When every actor has reported done, the runner sends each actor an exit
//     (user_shutdown) and aggregates the summaries (see run_summary).
//
// Data-plane messages between actors, all sent asynchronously:
//  - `(forward_atom, batch_msg)`       loader -> first stage (and the stage that
//                                       computes the loss, for the targets)
//  - `(forward_atom, activation_msg)`  stage i -> stage i+1
//  - `(backward_atom, gradient_msg)`   stage i+1 -> stage i
//  - `(credit_atom, credit_msg)`       receiver -> sender: may send `count` more
//  - `(bucket_atom, bucket_msg)`       stage -> its all-reduce peer: a bucket of
//                                       the step's gradients is complete
//  - `(ring_atom, ring_msg)`           all-reduce peer -> the next one in its ring
//  - `(reduced_atom, step_t, int32)`   all-reduce peer -> its stage: that bucket
//                                       now holds the sum over the replicas
//  - with `data_parallel.zero` the stage's ring member is an optimizer shard
//    (ZeRO, in actors/): `(reduced_atom, step_t, int32, double)`
//    says the bucket is reduce-scattered, with the Σ g² of the shard's slice of
//    it; `(shard_step_atom, step_t, float lr, float clip)` stage -> shard:
//    update your slice; `(updated_atom, step_t)` shard -> stage: every bucket's
//    parameters are all-gathered back into the stage
// An actor that writes checkpoints also sends the runner `(checkpoint_atom,
// checkpoint_msg)` for each part it wrote. Module-private messages (the
// pipeline's eval, norm and wake-ups) are declared in their module
// (actors/stage/pipeline_messages.hpp). Spans go to the trace recorder's per-thread
// buffers, not through messages.
// Tensor handles travel by value (a shared pointer to pooled storage): no
// bytes are copied inside one process. They are not serialised by CAF;
// between processes a channel actor moves the bytes.
// ---------------------------------------------------------------------------

namespace troupe {

// Verbs (CAF atoms are at most 10 characters).
using forward_atom = caf::atom_constant<caf::atom("forward")>;
using backward_atom = caf::atom_constant<caf::atom("backward")>;
using credit_atom = caf::atom_constant<caf::atom("credit")>;
using plan_atom = caf::atom_constant<caf::atom("plan")>;
using connect_atom = caf::atom_constant<caf::atom("connect")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using failed_atom = caf::atom_constant<caf::atom("failed")>;
using checkpoint_atom = caf::atom_constant<caf::atom("checkpoint")>;
using bucket_atom = caf::atom_constant<caf::atom("bucket")>;
using ring_atom = caf::atom_constant<caf::atom("ring")>;
using reduced_atom = caf::atom_constant<caf::atom("reduced")>;
using shard_step_atom = caf::atom_constant<caf::atom("shardstep")>;
using updated_atom = caf::atom_constant<caf::atom("updated")>;

/// Which microbatch of which step a message belongs to.
using step_t = std::int64_t;

/// One microbatch from the router: token ids `[batch, context]` (i32) for the
/// route's first hop, and the next-token targets of the same shape for its last
/// hop (the loss). Each goes to its own actor, so one of the two may be undefined.
struct batch_msg {
  step_t step = 0;
  std::int32_t microbatch = 0; ///< sequence number within the step (0, 1, ... across all routes)
  tensor_handle tokens;
  tensor_handle targets{};
  route_t route;
  /// Document-causal mask, i32 [batch, context] (ops/core_attention.hpp), sent with the
  /// tokens (each stage passes it on with its activations); undefined: causal.
  tensor_handle documents{};
  /// With attention servers (#15): the document masks of this microbatch's round,
  /// i32 [replicas, batch, context] (replica r's microbatch of the same index in the
  /// step), from which every stage of the round plans the same core-attention shards.
  tensor_handle round_documents{};
};

/// Activations flowing forward between stages, `[batch, context, d_model]`.
struct activation_msg {
  step_t step = 0;
  std::int32_t microbatch = 0;
  std::int32_t hop = 0; ///< the position on `route` of the receiver, which consumes it
  tensor_handle activation;
  route_t route;
  /// Set when `activation` is on a device and still being written by the
  /// sender's queued work: readers order themselves after it. Never serialised.
  device_fence_ptr ready = nullptr;
  /// The microbatch's document mask (batch_msg::documents), carried to every stage's attention.
  tensor_handle documents{};
  /// Its round's masks (batch_msg::round_documents), carried on likewise.
  tensor_handle round_documents{};
  /// The microbatch's targets, when routes are chosen on the way (least_loaded):
  /// the loss stage is not known when the batch is made, so they go along.
  tensor_handle targets{};
};

/// The loss gradient with respect to a stage's output, flowing backward.
struct gradient_msg {
  step_t step = 0;
  std::int32_t microbatch = 0;
  std::int32_t hop = 0; ///< the position on `route` of the receiver (whose forward made the activation)
  tensor_handle gradient;
  route_t route;
  device_fence_ptr ready = nullptr; ///< as activation_msg::ready
};

/// A bucket of a stage's gradients, complete for `step`, to its all-reduce peer
/// (always in the same process): the live gradient tensors themselves, which the
/// stage leaves alone until the peer answers `reduced` having written the sum
/// over the replicas into them.
struct bucket_msg {
  step_t step = 0;
  std::int32_t bucket = 0;
  std::vector<tensor_handle> tensors; ///< f32, in bucket order
  /// With ZeRO: the bucket's parameters, in the same order (the optimizer shard
  /// updates its slice of them and all-gathers the rest into them).
  std::vector<tensor_handle> params;
};

/// One message of a ring all-reduce (schedulers/sync/ring_allreduce.hpp): the chunk
/// of bucket `bucket` of `step` that the sender sends in `phase`.
struct ring_msg {
  step_t step = 0;
  std::int32_t bucket = 0;
  std::int32_t phase = 0;
  tensor_handle chunk; ///< f32 (or bf16: data_parallel.wire) [chunk elements], a copy the sender no longer touches
};

/// `(attention_atom, attention_task_msg)`: a core-attention shard for an attention
/// server (DistCA, #15), answered with `(attention_atom, attention_result_msg)`.
using attention_atom = caf::atom_constant<caf::atom("attention")>;

/// Which shard a core-attention task or result is: of stage `from`'s microbatch
/// `microbatch`, nano-batch `nano`, local layer `layer` of chunk `chunk`, shard
/// `shard` of the round's plan; `backward` for the backward pass.
struct attention_key {
  step_t step = 0;
  std::int32_t from = 0, microbatch = 0, nano = 0, chunk = 0, layer = 0, shard = 0;
  bool backward = false;
  auto tie() const { return std::tie(step, from, microbatch, nano, chunk, layer, shard); }
  friend bool operator<(const attention_key& a, const attention_key& b) { return a.tie() < b.tie(); }
};

/// One core-attention shard (ops/core_attention_shard.hpp): forward, its queries q
/// [q, C] and its prefix's keys and values k, v [kv, C]; backward, the gradient of
/// its output dout [q, C] (the server kept the rest from the forward).
struct attention_task_msg {
  attention_key key;
  std::int32_t heads = 1;
  tensor_handle q{}, k{}, v{}, dout{};
};

/// A server's answer: forward, out [q, C]; backward, dq [q, C], dk and dv [kv, C].
struct attention_result_msg {
  attention_key key;
  tensor_handle out{}, dq{}, dk{}, dv{};
};

/// Flow control: the receiver `from` (actor index) lets the sender have `count`
/// more messages in its buffers: granted at start, returned one by one as it
/// consumes them.
struct credit_msg {
  std::int32_t count = 1;
  std::int32_t from = 0;
  /// The receiver's load when it granted them (sched::load_report, seconds;
  /// 0 = not measured): least_loaded senders route by it. A count of 0 is a load report alone.
  double backlog_s = 0;
  double cost_s = 0;
};

/// How a channel touches the actor receiving connect_msg.
enum class channel_dir : std::uint8_t { in, out };

/// One end of a channel, as seen from the actor that receives it.
struct peer {
  std::string name;
  std::string type;
  caf::actor handle;
  channel_dir dir = channel_dir::out; ///< `out`: this actor sends to `handle`
  std::int32_t credits = 0;           ///< the channel's `credits:` (0 = policy decides)
};

/// Sent by the runner before start: who the actor is and whom it talks to.
struct connect_msg {
  std::string self;
  std::vector<peer> peers;     ///< one per channel touching `self`, graph order
  std::vector<peer> directory; ///< every actor of the graph (dir = out)
};

/// What an actor reports with `done_atom`. NaN marks an unknown number.
/// The runner aggregates: steps = max, tokens = sum, losses = the last
/// reported (by the actor that reports them), and takes the wall time itself.
struct run_summary {
  std::string actor;
  step_t steps = 0;        ///< optimizer steps this actor completed
  std::int64_t tokens = 0; ///< training tokens it consumed (count them once: the loss stage)
  double train_loss = std::numeric_limits<double>::quiet_NaN(); ///< mean over the last step
  double val_loss = std::numeric_limits<double>::quiet_NaN();   ///< last validation pass
  /// The same pass on a path of fewer stages (SkipPipe's `skip.path_length`, #14); NaN when none ran.
  double val_loss_short = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> losses; ///< train loss per step, when recorded
  /// Bytes of model state it holds (f32 parameters, gradients, optimizer
  /// state); -1 for an actor that holds none (the loader, an all-reduce peer).
  std::int64_t params_bytes = -1;
  std::int64_t grads_bytes = -1;
  std::int64_t optimizer_bytes = -1;
  std::int64_t bytes_sent = 0; ///< tensor bytes it sent to other actors over the run
  /// A stage's busy time (forward and backward actions: CPU time plus an
  /// emulated device's sleep) in each step of this run, from its first; empty
  /// for other actors (runtime/trace/step_stats.hpp).
  std::vector<std::int64_t> step_busy_ns;
  std::int32_t position = -1; ///< a stage's pipeline position: the replicas at it are its peers
  /// Optimizer post-validation (`train.clip: post_validate`): steps whose early
  /// update this stage rolled back and redid clipped.
  std::int64_t rollbacks = 0;
};

/// An actor wrote its part of the checkpoint after optimizer step `step`
/// (sent to the runner with `checkpoint_atom`). The runner marks the
/// checkpoint complete once every actor that checkpoints has reported it.
struct checkpoint_msg {
  std::string actor;
  step_t step = 0;
  std::string file; ///< what it wrote, relative to the checkpoint folder
};

/// Why an actor gave up (sent with `failed_atom`).
struct failure_msg {
  std::string actor;
  std::string what; ///< where and what, for the user
  step_t step = -1; ///< the 0-based step it was in, where it knows one (-1: none)
};

// CAF inspection: field lists for to_string and for the wire between processes
// (runtime/transport/wire.hpp, which also carries the tensors). A load_callback
// is what a value read from another process must hold.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_msg& x) {
  return f(caf::meta::type_name("batch_msg"), x.step, x.microbatch, x.tokens, x.targets, x.route, x.documents,
           x.round_documents);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, activation_msg& x) {
  return f(caf::meta::type_name("activation_msg"), x.step, x.microbatch, x.hop, x.activation, x.route, x.documents,
           x.round_documents, x.targets);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attention_key& x) {
  return f(caf::meta::type_name("attention_key"), x.step, x.from, x.microbatch, x.nano, x.chunk, x.layer, x.shard,
           x.backward);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attention_task_msg& x) {
  return f(caf::meta::type_name("attention_task_msg"), x.key, x.heads, x.q, x.k, x.v, x.dout);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attention_result_msg& x) {
  return f(caf::meta::type_name("attention_result_msg"), x.key, x.out, x.dq, x.dk, x.dv);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gradient_msg& x) {
  return f(caf::meta::type_name("gradient_msg"), x.step, x.microbatch, x.hop, x.gradient, x.route);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, bucket_msg& x) {
  // Its tensors stay out: a bucket never leaves its process (nor could a list of handles be serialised).
  return f(caf::meta::type_name("bucket_msg"), x.step, x.bucket);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ring_msg& x) {
  return f(caf::meta::type_name("ring_msg"), x.step, x.bucket, x.phase, x.chunk, caf::meta::load_callback([&] {
             return x.phase >= 0 && x.chunk.defined() && (x.chunk.type() == dtype::f32 || x.chunk.type() == dtype::bf16)
                      ? caf::error{}
                      : make_error(errc::malformed_frame,
                                   "ring chunk of phase " + std::to_string(x.phase) + " without f32 or bf16 values");
           }));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, credit_msg& x) {
  return f(caf::meta::type_name("credit_msg"), x.count, x.from, x.backlog_s, x.cost_s);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_plan_msg& x) {
  return f(caf::meta::type_name("step_plan_msg"), x.step, x.hops, x.tokens, x.participants, x.reducer);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hop& x) {
  return f(caf::meta::type_name("hop"), x.actor, x.chunk, caf::meta::load_callback([&] {
             return x.actor >= 0 && x.chunk >= 0
                      ? caf::error{}
                      : make_error(errc::malformed_frame,
                                   "route hop " + std::to_string(x.actor) + "." + std::to_string(x.chunk));
           }));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, peer& x) {
  return f(caf::meta::type_name("peer"), x.name, x.type, x.handle, x.dir, x.credits);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, connect_msg& x) {
  return f(caf::meta::type_name("connect_msg"), x.self, x.peers, x.directory);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_summary& x) {
  return f(caf::meta::type_name("run_summary"), x.actor, x.steps, x.tokens, x.train_loss, x.val_loss, x.val_loss_short,
           x.losses, x.params_bytes, x.grads_bytes, x.optimizer_bytes, x.bytes_sent, x.step_busy_ns, x.position,
           x.rollbacks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_msg& x) {
  return f(caf::meta::type_name("checkpoint_msg"), x.actor, x.step, x.file);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, failure_msg& x) {
  return f(caf::meta::type_name("failure_msg"), x.actor, x.what, x.step);
}

} // namespace troupe

// Handles share pooled memory and are only meaningful inside one process: CAF
// passes them by value and skips them when serialising (channels move bytes).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::tensor_handle)
