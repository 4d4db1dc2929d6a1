// The optimizers' CUDA kernels: each call selects the optimizer's device (the
// actor thread may have run another device's stage since) and queues on its stream.
#include "ops/cuda/optimizer_cuda.hpp"

#include <mutex>
#include <stdexcept>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "kernels/cuda/adamw.hpp"
#include "kernels/cuda/check.hpp"
#include "ops/optimizer.hpp"

namespace troupe::ops {

namespace {

void check(const gpu::status& st, device dev) {
  if (!st.ok())
    throw std::runtime_error(fmt::format("{}: optimizer: {}", to_string(dev), st.message()));
}

cudaStream_t stream_of(device_stream s) {
  return static_cast<cudaStream_t>(s);
}

gpu::status zero(float* dst, std::int64_t n, device dev, device_stream s) {
  TROUPE_CUDA_CHECK(cudaSetDevice(dev.index));
  TROUPE_CUDA_CHECK(cudaMemsetAsync(dst, 0, std::size_t(n) * sizeof(float), stream_of(s)));
  return {};
}

gpu::status zeros(const shape_t& shape, device dev, device_stream s, tensor_handle& out) {
  TROUPE_CUDA_CHECK(cudaSetDevice(dev.index)); // the pool's cudaMalloc allocates on the current device
  try {
    out = tensor_handle::empty(shape, dtype::f32, dev);
  } catch (const std::exception& e) {
    return gpu::status::failure(
      fmt::format("cannot allocate {} f32 on {}: {}", to_string(shape), to_string(dev), e.what()));
  }
  TROUPE_CUDA_CHECK(cudaMemsetAsync(out.raw(), 0, out.nbytes(), stream_of(s)));
  return {};
}

gpu::status download(void* host, const void* src, std::size_t bytes, device dev, device_stream s) {
  TROUPE_CUDA_CHECK(cudaSetDevice(dev.index));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream_of(s)));
  TROUPE_CUDA_CHECK(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
  return {};
}

gpu::status upload(void* dst, const void* host, std::size_t bytes, device dev, device_stream s) {
  TROUPE_CUDA_CHECK(cudaSetDevice(dev.index));
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_of(s)));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream_of(s))); // `host` may go away after the return
  return {};
}

gpu::status adamw(const adamw_device_args& a, device dev, device_stream s) {
  TROUPE_CUDA_CHECK(cudaSetDevice(dev.index));
  gpu::adamw_config c{a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, 1.0f, a.step};
  return gpu::adamw_step(a.param, a.exp_avg, a.exp_avg_sq, nullptr, a.grad, a.n, c, stream_of(s));
}

} // namespace

void register_cuda_optimizer_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    optimizer_device_kernels k;
    k.zeros = [](const shape_t& shape, device dev, device_stream s) {
      tensor_handle t;
      check(zeros(shape, dev, s, t), dev);
      return t;
    };
    k.zero = [](float* dst, std::int64_t n, device dev, device_stream s) { check(zero(dst, n, dev, s), dev); };
    k.download = [](void* host, const void* src, std::size_t bytes, device dev, device_stream s) {
      check(download(host, src, bytes, dev, s), dev);
    };
    k.upload = [](void* dst, const void* host, std::size_t bytes, device dev, device_stream s) {
      check(upload(dst, host, bytes, dev, s), dev);
    };
    k.adamw = [](const adamw_device_args& a, device dev, device_stream s) { check(adamw(a, dev, s), dev); };
    register_optimizer_kernels(device::kind_t::cuda, std::move(k));
  });
}

} // namespace troupe::ops
