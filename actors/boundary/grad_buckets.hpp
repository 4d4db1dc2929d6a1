// A data-parallel stage's gradient buckets: which parameters each holds, when
// each is complete during the step's last backward pass, and which the stage's
// all-reduce peer has given back summed over the replicas. Free of CAF.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "actors/stage/stage_model.hpp"
#include "runtime/actor/messages.hpp"
#include "schedulers/sync/ring_allreduce.hpp"

namespace troupe {

/// Buckets over the gradients of a stage's model chunks (sched::make_buckets'
/// order). During the step's last weight-gradient pass over a chunk each bucket
/// goes to the peer the moment the pass has written all its gradients (the
/// model's on_grads_done), so its all-reduce runs beside the rest of the
/// backward; the step waits only for the buckets still out. A stage that
/// computes the loss adds its Σ loss × tokens as a one-element tensor to the
/// bucket that completes last, so the step's loss is summed over the replicas
/// with the gradients.
class grad_buckets {
public:
  using send_fn = std::function<void(bucket_msg)>;

  /// Over `models` (kept by reference), `bucket_bytes` a bucket; `loss_sum`
  /// reads the stage's Σ loss × tokens when it computes the loss (else empty).
  /// With `zero` (the ring is of ZeRO's optimizer shards) the loss goes alone
  /// in one more bucket, so a shard's slice holds parameters only, and each
  /// bucket carries its parameters too. The parameters named in `alone` (whose
  /// gradient a component above rewrites at the step boundary: a tied matrix)
  /// go each in a bucket of its own, after the others, sent only by flush().
  grad_buckets(const std::vector<std::unique_ptr<stage_model>>& models, std::int64_t bucket_bytes,
               std::function<double()> loss_sum, send_fn send, bool zero = false,
               const std::vector<std::string>& alone = {});

  std::size_t size() const noexcept { return buckets_.size(); }
  /// Parameters of each bucket (sched::param_ref: chunk, index).
  const std::vector<std::vector<sched::param_ref>>& layout() const noexcept { return layout_; }

  /// Before a weight-gradient pass over `chunk` in `step`: `last` when no other
  /// pass over that chunk follows in the step (buckets then go out as it runs).
  void begin_pass(std::int64_t step, int chunk, bool last);
  void end_pass();
  /// The step's backward work is done here: sends every bucket not yet sent.
  /// True when every bucket is already back.
  bool flush(std::int64_t step);
  /// The peer gave bucket `b` of `step` back; true when it was the step's last.
  bool on_reduced(std::int64_t step, int b);
  /// The bucket that holds parameter `name` (of any chunk), or -1.
  int bucket_holding(std::string_view name) const;
  /// The step's Σ loss × tokens over all replicas (once every bucket is back).
  double loss_sum() const;
  /// Lets go of the gradient buffers (each bucket takes the model's live ones
  /// when it is sent), so that a model that releases them frees them (ZeRO-2).
  void drop_grads();

private:
  struct bucket {
    std::vector<tensor_handle> tensors;
    std::vector<tensor_handle> params; ///< ZeRO: the parameters of `tensors`
    int pending = 0;                   ///< parameters of this step's last pass still to be written
    bool sent = false;
    bool back = false;
  };
  void grads_done(int chunk, std::size_t first, std::size_t end);
  void send(int b);

  const std::vector<std::unique_ptr<stage_model>>& models_;
  std::function<double()> loss_sum_;
  send_fn send_;
  std::vector<std::vector<sched::param_ref>> layout_;
  std::vector<std::vector<int>> bucket_of_; ///< [chunk][param] -> bucket
  std::vector<bucket> buckets_;
  std::vector<bool> deferred_;                    ///< [bucket]: a bucket of `alone`, sent only by flush()
  std::vector<std::vector<shape_t>> grad_shapes_; ///< [bucket][i]: zeros when a model holds none (ZeRO-2)
  tensor_handle loss_;                            ///< f32 [1] in the last bucket, on the loss stage
  std::int64_t step_ = -1;
  int armed_chunk_ = -1; ///< the chunk whose last pass is running, or -1
  int back_ = 0;
};

} // namespace troupe
