// The optimizer interface: an update rule over any list of parameters (a model
// chunk's, or the slice an optimizer shard owns), holding and checkpointing its
// own state. Device kernels plug in from their backend's library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/named_tensor.hpp"

namespace troupe::ops {

/// Where an optimizer queues its device work: the stream of the model whose
/// parameters it updates, so the update runs after that model's backward and
/// before its next forward (CUDA: a cudaStream_t, opaque outside the backend).
/// Null for CPU parameters.
using device_stream = void*;

struct optimizer_device_kernels;

/// An optimizer's state as a checkpoint holds it.
struct optimizer_state {
  long steps = 0; ///< updates applied so far
  /// f32 tensors named `KIND.PARAM` (`exp_avg.h.0.attn.c_attn.weight`), shaped
  /// like their parameter: for each parameter in the optimizer's order, one per
  /// kind in state_kinds() order. Empty while `steps` is 0 (the state is zero).
  std::vector<named_tensor> tensors;
};

/// An update rule over a fixed list of f32 parameters on one device. It keeps,
/// per parameter, one state buffer of each of its kinds (AdamW: `exp_avg`,
/// `exp_avg_sq`), zero at first.
///
/// Errors (lists that do not line up, state of the wrong shape, a device with
/// no kernels) throw std::invalid_argument naming the call; a device failure
/// throws std::runtime_error. One thread at a time.
class optimizer {
public:
  virtual ~optimizer() = default;
  optimizer(const optimizer&) = delete;
  optimizer& operator=(const optimizer&) = delete;

  /// One update at rate `lr`. `params` and `grads` match, by position, the list
  /// the optimizer was made over (same element counts); `params` are updated in
  /// place. On a device the work is queued on the optimizer's stream.
  void step(const std::vector<named_tensor>& params, const std::vector<named_tensor>& grads, float lr);
  /// Updates applied so far (AdamW's t).
  long steps() const noexcept { return steps_; }
  /// The names of the state buffers kept per parameter.
  const std::vector<std::string>& state_kinds() const noexcept { return kinds_; }
  /// The state as host tensors: on the CPU the live storage (read it before the
  /// next step), from a device a copy made once the queued work is done.
  optimizer_state state() const;
  /// Replaces the whole state with `s` (names, order and shapes as state() gives
  /// them; no tensors when `s.steps` is 0). Checked first: on a mismatch it
  /// throws std::invalid_argument and changes nothing.
  void load_state(const optimizer_state& s);

protected:
  optimizer(optimizer&&) noexcept = default; ///< moved as its concrete type only
  optimizer& operator=(optimizer&&) noexcept = default;
  /// Made over `params` (their names, shapes and device; the handles are not
  /// kept), with one zeroed buffer per parameter and kind.
  optimizer(const std::vector<named_tensor>& params, std::vector<std::string> kinds, device_stream stream,
            const char* name);
  /// Applies one update to parameter `i` (steps() already counts it).
  virtual void update(std::size_t i, const tensor_handle& param, const tensor_handle& grad, float lr) = 0;
  /// Parameter i's state buffer of kind k (on the parameters' device).
  const tensor_handle& buffer(std::size_t i, std::size_t k) const { return state_[i * kinds_.size() + k]; }
  /// The shape of parameter i as the optimizer was made over it.
  const shape_t& shape(std::size_t i) const { return shapes_[i]; }
  device_stream stream() const noexcept { return stream_; }
  const char* name() const noexcept { return name_; }
  troupe::device device() const noexcept { return device_; }
  /// The kernels of the parameters' device (not the CPU).
  const optimizer_device_kernels& device_kernels() const { return *kernels_; }

private:
  const char* name_;
  std::vector<std::string> kinds_;
  std::vector<std::string> names_;
  std::vector<shape_t> shapes_;
  std::vector<tensor_handle> state_; ///< parameter-major: buffer(i, k)
  troupe::device device_;
  device_stream stream_;
  std::shared_ptr<const optimizer_device_kernels> kernels_; ///< null on the CPU
  long steps_ = 0;
};

/// One AdamW update of `n` elements on a device (kernels/cuda/adamw.hpp).
struct adamw_device_args {
  float* param;
  const float* grad;
  float *exp_avg, *exp_avg_sq;
  std::int64_t n;
  float lr, beta1, beta2, eps, weight_decay;
  long step; ///< 1-based, for the bias corrections
};

/// What a device backend provides for the optimizers on its kind of device.
/// Each works on device `dev` (whichever device the calling thread had current)
/// and its stream; pointers are that device's memory unless named host. Each
/// throws std::runtime_error on a device error.
struct optimizer_device_kernels {
  /// A new f32 tensor of `shape` on `dev`, zeroed on the stream (memory comes
  /// from `dev`'s pool with `dev` made current, whatever the thread had).
  std::function<tensor_handle(const shape_t& shape, device dev, device_stream)> zeros;
  /// Queues writing `n` zeros at `dst`.
  std::function<void(float* dst, std::int64_t n, device dev, device_stream)> zero;
  /// Waits for the stream's queued work, then copies `bytes` to host memory.
  std::function<void(void* host_dst, const void* src, std::size_t bytes, device dev, device_stream)> download;
  /// Copies `bytes` from host memory and returns once they are written.
  std::function<void(void* dst, const void* host_src, std::size_t bytes, device dev, device_stream)> upload;
  /// Queues one AdamW update.
  std::function<void(const adamw_device_args&, device dev, device_stream)> adamw;
};

/// Registers the optimizer kernels of a device kind (the CUDA library does, when loaded).
void register_optimizer_kernels(device::kind_t kind, optimizer_device_kernels k);

} // namespace troupe::ops
