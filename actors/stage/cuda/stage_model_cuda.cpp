// The CUDA backend of stage models: gpt_cuda behind the stage_model interface,
// with event fences on what it hands out. A library of its own that
// actors/stage/stage_model.cpp loads when a graph puts a stage on a GPU.
#include <deque>
#include <stdexcept>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "actors/stage/stage_model.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "ops/cuda/gpt_cuda.hpp"
#include "ops/cuda/optimizer_cuda.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe {

namespace {

/// A CUDA event recorded on the stream of the work that writes a tensor.
class cuda_fence final : public device_fence {
public:
  explicit cuda_fence(cudaEvent_t e) noexcept : event_(e) {}
  cuda_fence(const cuda_fence&) = delete;
  cuda_fence& operator=(const cuda_fence&) = delete;
  ~cuda_fence() override { (void)cudaEventDestroy(event_); } // released once the event completes

  cudaEvent_t event() const noexcept { return event_; }
  void wait() const override {
    if (auto e = cudaEventSynchronize(event_); e != cudaSuccess)
      throw std::runtime_error(gpu::cuda_failure(e, "cudaEventSynchronize", __FILE__, __LINE__).message());
  }
  /// True once the work before the event is done (or the device failed: nothing waits then).
  bool passed() const noexcept { return cudaEventQuery(event_) != cudaErrorNotReady; }

private:
  cudaEvent_t event_;
};

/// A fence after everything queued on `stream` so far.
gpu::status record_fence(cudaStream_t stream, std::shared_ptr<const cuda_fence>& out) {
  cudaEvent_t e = nullptr;
  TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  out = std::make_shared<const cuda_fence>(e);
  TROUPE_CUDA_CHECK(cudaEventRecord(e, stream));
  return {};
}

/// An f32 [1] host tensor holding `v` (a loss, as the engine reads it).
tensor_handle host_scalar(float v) {
  auto t = tensor_handle::empty({1});
  t.data<float>()[0] = v;
  return t;
}

class cuda_stage_model final : public stage_model {
public:
  explicit cuda_stage_model(const stage_model_spec& s)
      : dev_(s.device.index), model_(s.model, s.begin, s.end, s.max_batch, s.device.index) {
    check(model_.init());
  }
  cuda_stage_model(const cuda_stage_model&) = delete;
  cuda_stage_model& operator=(const cuda_stage_model&) = delete;
  ~cuda_stage_model() override {
    // Queued work may still read what retiring_ keeps: finish it before the
    // storage goes back to the pool.
    (void)cudaSetDevice(dev_);
    (void)model_.synchronize();
  }

  troupe::device device() const noexcept override { return device::cuda(dev_); }
  bool is_first() const noexcept override { return model_.begin() == 0; }
  bool is_last() const noexcept override { return model_.end() == model_.config().layers; }

  stage_tensor forward(int mb, const stage_tensor& input, const tensor_handle& targets) override {
    no_documents(input, "forward");
    enter();
    std::vector<tensor_handle> keep{targets};
    auto x = readable(input, keep);
    tensor_handle out;
    auto st = model_.forward(mb, x, targets, out);
    retire(std::move(keep));
    check(st);
    if (!is_last())
      return publish(out);
    float loss = 0;
    check(model_.loss(loss));
    return {host_scalar(loss), nullptr, {}};
  }

  stage_tensor backward(int mb, const stage_tensor& grad_out) override { return run_backward(mb, grad_out, false); }
  stage_tensor backward_input(int mb, const stage_tensor& grad_out) override {
    return run_backward(mb, grad_out, true);
  }
  void backward_weight(int mb) override {
    enter();
    check(model_.backward_weight(mb));
  }

  stage_tensor evaluate(const stage_tensor& input, const tensor_handle& targets) override {
    no_documents(input, "evaluate");
    enter();
    std::vector<tensor_handle> keep{targets};
    auto x = readable(input, keep);
    tensor_handle out;
    auto st = model_.evaluate(x, targets, out);
    retire(std::move(keep));
    check(st);
    if (!is_last())
      return publish(out); // the next evaluate reuses `out`'s buffer
    float loss = 0;
    check(
      cuda(cudaMemcpyAsync(&loss, out.raw(), sizeof loss, cudaMemcpyDeviceToHost, model_.stream()), "cudaMemcpyAsync"));
    check(model_.synchronize());
    return {host_scalar(loss), nullptr, {}};
  }

  int in_flight() const override { return model_.in_flight(); }

  void zero_grads() override {
    enter();
    check(model_.zero_grads());
  }
  double grad_sq_norm() override {
    enter();
    double sq = 0;
    check(model_.grad_sq_norm(sq));
    return sq;
  }
  void scale_grads(float factor) override {
    enter();
    check(model_.scale_grads(factor));
  }
  const std::vector<ops::named_tensor>& params() const override { return model_.params(); }
  const std::vector<ops::named_tensor>& grads() const override { return model_.grads(); }
  ops::device_stream stream() const noexcept override { return model_.stream(); }
  void params_updated() override {
    enter();
    check(model_.params_updated());
  }

  std::vector<param_info> param_layout() const override {
    std::vector<param_info> out;
    auto names = model_.param_names();
    auto shapes = model_.param_shapes();
    for (std::size_t i = 0; i < names.size(); ++i)
      out.push_back({names[i], shapes[i], dtype::f32});
    return out;
  }

  std::vector<ops::named_tensor> host_params() override {
    enter();
    std::vector<ops::named_tensor> out;
    for (const auto& p : param_layout()) {
      auto t = tensor_handle::empty(p.shape);
      check(model_.download(ops::gpt_cuda::buffer::master, p.name, t.data<float>()));
      out.push_back({p.name, t});
    }
    return out;
  }

  void load_params(const std::vector<tensor_handle>& params) override {
    auto layout = param_layout();
    if (params.size() != layout.size())
      throw std::invalid_argument(
        fmt::format("load_params: {} parameters for a model of {}", params.size(), layout.size()));
    for (std::size_t i = 0; i < layout.size(); ++i)
      if (!(params[i].shape() == layout[i].shape) || params[i].type() != dtype::f32)
        throw std::invalid_argument(fmt::format("load_params: '{}' is {} {}, the model's is f32 {}", layout[i].name,
                                                to_string(params[i].type()), to_string(params[i].shape()),
                                                to_string(layout[i].shape)));
    enter();
    for (std::size_t i = 0; i < layout.size(); ++i) {
      auto host = copy_to_host(params[i]);
      check(model_.upload(ops::gpt_cuda::buffer::master, layout[i].name, host.data<float>()));
    }
  }

private:
  /// Document masks (data.documents) are not passed to gpt_cuda yet: refuse them
  /// rather than train with plain causal attention.
  static void no_documents(const stage_tensor& input, const char* call) {
    if (input.documents.defined())
      throw std::invalid_argument(fmt::format("cuda stage {}: document masks (data.documents) run on CPU stages only "
                                              "for now",
                                              call));
  }
  /// A retired input: storage kept until the work that reads it has passed `done`.
  struct retired {
    std::vector<tensor_handle> tensors;
    std::shared_ptr<const cuda_fence> done;
  };

  void check(const gpu::status& st) const {
    if (!st.ok())
      throw std::runtime_error(fmt::format("cuda:{}: {}", dev_, st.message()));
  }
  static gpu::status cuda(cudaError_t e, const char* call) {
    return e == cudaSuccess ? gpu::status{} : gpu::cuda_failure(e, call, __FILE__, __LINE__);
  }

  /// Every call starts here: the calling thread (any of the actor system's) on
  /// this model's device, and retired inputs whose readers finished released.
  void enter() {
    check(cuda(cudaSetDevice(dev_), "cudaSetDevice"));
    while (!retiring_.empty() && retiring_.front().done->passed())
      retiring_.pop_front();
  }

  /// `in` as gpt_cuda reads it on this model's stream: after the producer's
  /// fence, and an f32 activation or gradient (from a CPU stage) as bf16. What
  /// the stream will read is added to `keep`.
  tensor_handle readable(const stage_tensor& in, std::vector<tensor_handle>& keep) {
    if (!in.defined())
      return {};
    if (in.ready) {
      if (const auto* f = dynamic_cast<const cuda_fence*>(in.ready.get()))
        check(cuda(cudaStreamWaitEvent(model_.stream(), f->event(), 0), "cudaStreamWaitEvent"));
      else
        in.ready->wait(); // another kind of device: wait on the host
    }
    keep.push_back(in.value);
    if (in.value.type() != dtype::f32)
      return in.value; // tokens (i32) or bf16 activations: as they are
    auto src = in.value;
    if (!src.device().is_cuda()) {
      auto up = tensor_handle::empty(src.shape(), dtype::f32, device::cuda(dev_));
      check(cuda(cudaMemcpyAsync(up.raw(), src.raw(), src.nbytes(), cudaMemcpyDefault, model_.stream()),
                 "cudaMemcpyAsync"));
      keep.push_back(up);
      src = up;
    }
    auto bf = tensor_handle::empty(src.shape(), dtype::bf16, device::cuda(dev_));
    check(gpu::convert(bf.data<__nv_bfloat16>(), src.data<float>(), src.numel(), model_.stream()));
    keep.push_back(bf);
    return bf;
  }

  /// Keeps `tensors` until the work queued so far is done, so their storage is
  /// not handed out again (the pool knows nothing of streams) while it is read.
  void retire(std::vector<tensor_handle> tensors) {
    if (tensors.empty())
      return;
    std::shared_ptr<const cuda_fence> done;
    auto st = record_fence(model_.stream(), done);
    if (!st.ok()) {
      (void)model_.synchronize(); // no event: wait instead, then let them go
      check(st);
    }
    retiring_.push_back({std::move(tensors), std::move(done)});
  }

  /// A copy of `t` (model-owned, reused by later calls) that belongs to the
  /// receiver, with the fence after which it is written.
  stage_tensor publish(const tensor_handle& t) {
    auto owned = tensor_handle::empty(t.shape(), t.type(), device::cuda(dev_));
    check(cuda(cudaMemcpyAsync(owned.raw(), t.raw(), t.nbytes(), cudaMemcpyDeviceToDevice, model_.stream()),
               "cudaMemcpyAsync"));
    std::shared_ptr<const cuda_fence> ready;
    check(record_fence(model_.stream(), ready));
    return {owned, ready, {}};
  }

  stage_tensor run_backward(int mb, const stage_tensor& grad_out, bool input_only) {
    enter();
    float scale = 1.0f; // the last chunk's loss gradient, a host scalar
    tensor_handle g;
    std::vector<tensor_handle> keep;
    if (is_last()) {
      if (auto h = copy_to_host(grad_out.value, grad_out.ready.get()); h.defined())
        scale = h.data<float>()[0];
    } else {
      g = readable(grad_out, keep);
    }
    tensor_handle dx;
    auto st = input_only ? model_.backward_input(mb, g, scale, dx) : model_.backward(mb, g, scale, dx);
    retire(std::move(keep));
    check(st);
    return dx.defined() ? publish(dx) : stage_tensor{};
  }

  int dev_;
  ops::gpt_cuda model_;
  std::deque<retired> retiring_;
};

/// How many CUDA devices this process sees, or why it sees none.
caf::expected<int> cuda_devices() {
  int n = 0;
  if (auto e = cudaGetDeviceCount(&n); e != cudaSuccess) {
    (void)cudaGetLastError();
    return make_error(errc::spawn_failed, fmt::format("no CUDA device is available (cudaGetDeviceCount: {} ({}))",
                                                      cudaGetErrorName(e), cudaGetErrorString(e)));
  }
  return n;
}

} // namespace

} // namespace troupe

/// The entry load_plugin calls (runtime/actor/plugin.hpp): makes CUDA stage models available.
extern "C" void troupe_register_plugin() {
  troupe::ops::register_cuda_optimizer_kernels(); // the engine's optimizers over CUDA stages' parameters
  troupe::register_stage_model_backend(troupe::device::kind_t::cuda,
                                       {troupe::cuda_devices, [](const troupe::stage_model_spec& s) {
                                          return std::make_unique<troupe::cuda_stage_model>(s);
                                        }});
}
