// The model chunk a pipeline stage drives, on whichever device it runs: the CPU
// gpt_range, or gpt_cuda from the CUDA backend (loaded only when a graph asks).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "ops/gpt.hpp"
#include "ops/optimizer.hpp"
#include "runtime/tensor/device_fence.hpp"
#include "runtime/graph/graph_spec.hpp"
#include "runtime/tensor/tensor_handle.hpp"

namespace troupe {

/// A tensor handed from one stage to another, and the device work that must
/// finish before it may be read (null: readable now, as every host tensor is).
struct stage_tensor {
  tensor_handle value;
  device_fence_ptr ready;
  /// An input's document-causal mask, i32 [B, T] on the host (ops/core_attention.hpp);
  /// a forward's output carries its input's on, to the next stage. Undefined: causal.
  tensor_handle documents{};
  /// With attention servers: the masks of its round, i32 [replicas, B, T]
  /// (batch_msg::round_documents), carried on like `documents`.
  tensor_handle round_documents{};
  bool defined() const noexcept { return value.defined(); }
};

/// `t` as gpt_range takes it: on the host, and f32 where it is bf16 (an
/// activation or gradient from a CUDA stage, or sent as bf16: `pipeline.wire`).
/// Host f32 and i32 pass unchanged.
tensor_handle host_f32(const stage_tensor& t);

/// A parameter's name, shape and type, in the model's order.
struct param_info {
  std::string name;
  shape_t shape;
  dtype type = dtype::f32;
};

/// Layers [begin, end) of the GPT (ops/gpt.hpp describes the cut) on one device.
/// The stage engine's only view of the model. It has no optimizer: it exposes
/// its parameters and gradients, an ops::optimizer made over them updates the
/// parameters, and params_updated() tells the model so.
///
/// Inputs: the first chunk takes i32 tokens [B, T]; the others take activations
/// [B, T, d_model] in f32 or bf16, on the host or on a device, each converted to
/// what the chunk computes in. An input's `ready` fence is honoured, and the
/// input's storage is kept until the work that reads it is done. Outputs that go
/// to another stage are stage_tensors owned by the caller (the model never writes
/// them again). The last chunk's forward and evaluate return the loss as a host
/// f32 [1]; its backward takes the loss gradient as a host f32 [1].
///
/// Errors (bad shapes, unknown microbatches, a device failure) throw
/// std::runtime_error or std::invalid_argument naming the call; the stage actor
/// reports them. One thread at a time.
class stage_model {
public:
  virtual ~stage_model() = default;

  virtual troupe::device device() const noexcept = 0;
  virtual bool is_first() const noexcept = 0;
  virtual bool is_last() const noexcept = 0;

  /// Training forward of microbatch `mb`; the last chunk needs i32 `targets`.
  virtual stage_tensor forward(int mb, const stage_tensor& input, const tensor_handle& targets) = 0;
  /// Fused backward of `mb`: returns the gradient wrt its input (undefined for the first chunk).
  virtual stage_tensor backward(int mb, const stage_tensor& grad_out) = 0;
  /// Input-gradient half of backward (zero-bubble "I").
  virtual stage_tensor backward_input(int mb, const stage_tensor& grad_out) = 0;
  /// Weight-gradient half (zero-bubble "W"), after backward_input of the same `mb`.
  virtual void backward_weight(int mb) = 0;
  /// Forward for evaluation, keeping nothing for a backward.
  virtual stage_tensor evaluate(const stage_tensor& input, const tensor_handle& targets) = 0;
  /// Microbatches whose forward ran and whose backward has not finished.
  virtual int in_flight() const = 0;

  virtual void zero_grads() = 0;
  /// Gives the gradient buffers back until the next backward, which starts from
  /// zeroed ones (ZeRO-2 between steps); grads() then holds undefined tensors.
  /// A model that cannot (a device model) keeps them.
  virtual void release_grads() {}
  /// Σ g² over this chunk's gradients (combined across chunks and ranks for clipping).
  virtual double grad_sq_norm() = 0;
  virtual void scale_grads(float factor) = 0;
  /// Asks to be told, during each backward that computes weight gradients, when
  /// the gradients of parameters [first, end) (params() order) have had that
  /// call's contribution (ops::gpt_range::on_grads_done); host gradients only.
  /// False when this model cannot tell (a device model): its gradients are
  /// complete only when the step's backward work is.
  virtual bool on_grads_done(std::function<void(std::size_t first, std::size_t end)>) { return false; }

  /// Parameters and their gradients, in param_layout() order with the same
  /// names: live f32 tensors on the model's device (a CUDA chunk's are its f32
  /// master weights and gradients). Writing a parameter changes the model; call
  /// params_updated() after. The lists stay valid as long as the model.
  virtual const std::vector<ops::named_tensor>& params() const = 0;
  virtual const std::vector<ops::named_tensor>& grads() const = 0;
  /// Where device work on the parameters and gradients must be queued (an
  /// optimizer's stream, ops/optimizer.hpp); null on the CPU.
  virtual ops::device_stream stream() const noexcept { return nullptr; }
  /// After the parameters were written in place (an optimizer step): a model
  /// that computes from a copy of its weights (a CUDA chunk's bf16 weights)
  /// refreshes it, queued on stream().
  virtual void params_updated() {}

  /// Names, shapes and types of the parameters, in order (what a checkpoint must match).
  virtual std::vector<param_info> param_layout() const = 0;
  /// The parameters as host tensors (CPU: the live storage; a device chunk copies them).
  virtual std::vector<ops::named_tensor> host_params() = 0;
  /// Replaces the parameters with `params`, in param_layout() order and shapes
  /// (host tensors). Checked first: a mismatch throws std::invalid_argument.
  virtual void load_params(const std::vector<tensor_handle>& params) = 0;
};

/// What a stage model is made from.
struct stage_model_spec {
  ops::gpt_config model;
  int begin = 0, end = 0; ///< the layers [begin, end)
  troupe::device device;
  int max_batch = 1; ///< sequences per microbatch (device buffers are sized for it)
};

/// A stage model on the CPU over `range`, which it does not own (the engine
/// keeps its CPU chunks together, for code that needs the gpt_range itself).
std::unique_ptr<stage_model> make_cpu_stage_model(ops::gpt_range& range);

/// The models of one device kind other than the CPU, registered by its backend.
struct stage_model_backend {
  /// How many devices this process can use, or why none (an errc::spawn_failed
  /// error whose text says which call failed and how).
  std::function<caf::expected<int>()> devices;
  /// A model on `spec.device`; throws std::runtime_error when it cannot be made.
  std::function<std::unique_ptr<stage_model>(const stage_model_spec& spec)> make;
};

/// Registers the backend for a device kind (the CUDA library does, when loaded).
void register_stage_model_backend(device::kind_t kind, stage_model_backend b);

/// The backend for `kind`, loading the CUDA one from the library beside this one
/// at the first request; an errc::spawn_failed error says why there is none
/// (built without it, or the library failed to load).
caf::expected<stage_model_backend> stage_model_backend_for(device::kind_t kind);

/// A model for `spec` (CPU models own their range here); throws std::runtime_error
/// when the device has no backend or the model cannot be made on it.
std::unique_ptr<stage_model> make_stage_model(const stage_model_spec& spec);

/// The device pipeline stage `stage` runs on: its `device:` (`cpu`, `cuda:N`, or
/// `cuda`, which means cuda:i where i is the stage's index among the CUDA stages
/// on its node, by rank, modulo `cuda_devices`). An errc::spawn_failed error says
/// why it cannot run: "device cuda:3 requested but ..." (no device, too few).
/// `cuda_devices` is what the CUDA backend's devices() answered.
caf::expected<troupe::device> stage_device(const actor_spec& stage, const graph_spec& g,
                                           const caf::expected<int>& cuda_devices);

} // namespace troupe
