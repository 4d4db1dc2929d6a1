// The fused AdamW kernel: one read and one write of each state array per step.
#include "kernels/cuda/adamw.hpp"
#include "kernels/cuda/common.cuh"

#include <cmath>
#include <string>

namespace troupe::gpu {

namespace {

using namespace detail;

struct step_consts {
  float lr, beta1, beta2, eps, decay, grad_scale, bc1, bc2; // bc = 1 - beta^step
};

template <typename G>
__global__ void adamw_kernel(float* master, float* m, float* v, __nv_bfloat16* copy, const G* grad, std::int64_t n,
                             step_consts k) {
  for (std::int64_t i = blockIdx.x * (std::int64_t)blockDim.x + threadIdx.x; i < n;
       i += (std::int64_t)gridDim.x * blockDim.x) {
    float g = to_f32(grad[i]) * k.grad_scale;
    float mi = k.beta1 * m[i] + (1.0f - k.beta1) * g;
    float vi = k.beta2 * v[i] + (1.0f - k.beta2) * g * g;
    float p = master[i] * (1.0f - k.lr * k.decay);
    p -= k.lr * (mi / k.bc1) / (sqrtf(vi / k.bc2) + k.eps);
    m[i] = mi;
    v[i] = vi;
    master[i] = p;
    if (copy != nullptr)
      copy[i] = __float2bfloat16_rn(p);
  }
}

template <typename G>
status run(float* master, float* m, float* v, __nv_bfloat16* copy, const G* grad, std::int64_t n, const adamw_config& c,
           cudaStream_t s) {
  if (n < 0 || c.step < 1)
    return status::failure("adamw_step: bad arguments n=" + std::to_string(n) + " step=" + std::to_string(c.step));
  if (n == 0)
    return {};
  step_consts k{c.lr,
                c.beta1,
                c.beta2,
                c.eps,
                c.weight_decay,
                c.grad_scale,
                static_cast<float>(1.0 - std::pow(static_cast<double>(c.beta1), static_cast<double>(c.step))),
                static_cast<float>(1.0 - std::pow(static_cast<double>(c.beta2), static_cast<double>(c.step)))};
  adamw_kernel<<<grid_for(n, 256), 256, 0, s>>>(master, m, v, copy, grad, n, k);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

} // namespace

status adamw_step(float* master, float* m, float* v, __nv_bfloat16* copy, const float* grad, std::int64_t n,
                  const adamw_config& cfg, cudaStream_t s) {
  return run(master, m, v, copy, grad, n, cfg, s);
}

status adamw_step(float* master, float* m, float* v, __nv_bfloat16* copy, const __nv_bfloat16* grad, std::int64_t n,
                  const adamw_config& cfg, cudaStream_t s) {
  return run(master, m, v, copy, grad, n, cfg, s);
}

} // namespace troupe::gpu
