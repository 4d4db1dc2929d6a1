// gpt_cuda's gradients seen from outside: the global norm and scaling for
// clipping, and the f32 arrays read and written for checkpoints.
#include <fmt/format.h>

#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/sum_squares.hpp"
#include "ops/cuda/gpt_cuda_impl.hpp"

namespace troupe::ops {

namespace {

/// The parameter called `name`, or nullptr.
const cuda_param* find_param(const gpt_cuda::impl& m, const std::string& name) {
  for (const auto& p : m.params)
    if (p.name == name)
      return &p;
  return nullptr;
}

/// Parameter `name`, for the call `op` (which needs init() to have succeeded).
gpu::status lookup(const gpt_cuda::impl& m, const char* op, const std::string& name, const cuda_param*& out) {
  if (!m.ready)
    return fail(op, "init() has not succeeded");
  out = find_param(m, name);
  if (!out)
    return fail(op, fmt::format("no parameter named '{}'", name));
  return {};
}

/// The start of parameter `p` in the flat array `which`.
float* buffer_at(gpt_cuda::impl& m, gpt_cuda::buffer which, const cuda_param& p) {
  switch (which) {
  case gpt_cuda::buffer::master:
    return m.master.data<float>() + p.offset;
  case gpt_cuda::buffer::grad:
    return m.grad.data<float>() + p.offset;
  }
  return nullptr;
}

} // namespace

gpu::status gpt_cuda::grad_sq_norm(double& out) {
  constexpr auto op = "gpt_cuda::grad_sq_norm";
  auto& m = *impl_;
  if (!m.ready)
    return fail(op, "init() has not succeeded");
  if (!m.norm) {
    std::vector<tensor_handle> keep;
    void* p = nullptr;
    TROUPE_GPU_TRY(m.alloc(keep, 2, dtype::f32, &p)); // 8 bytes, 512-byte aligned
    m.norm_t = keep.back();
    m.norm = static_cast<double*>(p);
  }
  TROUPE_CUDA_CHECK(cudaMemsetAsync(m.norm, 0, sizeof(double), m.stream));
  for (std::size_t i = 0; i < m.params.size(); ++i) // real elements only: not the padding between them
    TROUPE_GPU_TRY(gpu::sum_squares(m.norm, m.g(i), m.params[i].numel, m.stream));
  double sum = 0;
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(&sum, m.norm, sizeof sum, cudaMemcpyDeviceToHost, m.stream));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  out = sum;
  return {};
}

gpu::status gpt_cuda::scale_grads(float factor) {
  auto& m = *impl_;
  if (!m.ready)
    return fail("gpt_cuda::scale_grads", "init() has not succeeded");
  for (std::size_t i = 0; i < m.params.size(); ++i)
    TROUPE_GPU_TRY(gpu::scale(m.g(i), factor, m.params[i].numel, m.stream));
  return {};
}

gpu::status gpt_cuda::download(buffer which, const std::string& name, float* out) {
  auto& m = *impl_;
  const cuda_param* p = nullptr;
  TROUPE_GPU_TRY(lookup(m, "gpt_cuda::download", name, p));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  TROUPE_CUDA_CHECK(
    cudaMemcpy(out, buffer_at(m, which, *p), std::size_t(p->numel) * sizeof(float), cudaMemcpyDeviceToHost));
  return {};
}

gpu::status gpt_cuda::upload(buffer which, const std::string& name, const float* in) {
  auto& m = *impl_;
  const cuda_param* p = nullptr;
  TROUPE_GPU_TRY(lookup(m, "gpt_cuda::upload", name, p));
  float* dst = buffer_at(m, which, *p);
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, in, std::size_t(p->numel) * sizeof(float), cudaMemcpyHostToDevice, m.stream));
  if (which == buffer::master)
    TROUPE_GPU_TRY(gpu::convert(m.wbf.data<bf16>() + p->offset, dst, p->numel, m.stream));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(m.stream)); // `in` may go away after the return
  return {};
}

gpu::status gpt_cuda::download_param(const std::string& name, std::vector<float>& out) {
  const auto* p = find_param(*impl_, name);
  out.resize(p ? std::size_t(p->numel) : 0);
  return download(buffer::master, name, out.data());
}

gpu::status gpt_cuda::download_grad(const std::string& name, std::vector<float>& out) {
  const auto* p = find_param(*impl_, name);
  out.resize(p ? std::size_t(p->numel) : 0);
  return download(buffer::grad, name, out.data());
}

} // namespace troupe::ops
