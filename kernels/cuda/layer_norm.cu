// Layer norm kernels: one warp per row; the backward pass sums the weight
// gradients of its rows (in registers up to 1024 columns, else in shared
// memory) and adds them to global memory once per block.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/layer_norm.hpp"

#include <string>

namespace troupe::gpu {

namespace {

using namespace detail;

constexpr int warps_per_block = 8;

template <typename T>
__global__ void ln_forward(T* y, float* mean, float* rstd, const T* x, const T* gamma, const T* beta, int rows,
                           int cols, float eps) {
  int lane = threadIdx.x % 32;
  int row = blockIdx.x * warps_per_block + threadIdx.x / 32;
  if (row >= rows)
    return;
  const T* xr = x + (long long)row * cols;
  float s = 0.0f;
  for (int c = lane; c < cols; c += 32)
    s += to_f32(xr[c]);
  float mu = warp_sum(s) / cols;
  float v = 0.0f;
  for (int c = lane; c < cols; c += 32) {
    float d = to_f32(xr[c]) - mu;
    v += d * d;
  }
  float rs = rsqrtf(warp_sum(v) / cols + eps);
  T* yr = y + (long long)row * cols;
  for (int c = lane; c < cols; c += 32)
    yr[c] = from_f32<T>((to_f32(xr[c]) - mu) * rs * to_f32(gamma[c]) + to_f32(beta[c]));
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

/// Dynamic shared memory: 2 * cols floats (dgamma and dbeta partial sums).
template <typename T>
__global__ void ln_backward(T* dx, float* dgamma, float* dbeta, const T* dy, const T* x, const T* gamma,
                            const float* mean, const float* rstd, int rows, int cols) {
  extern __shared__ float sh[];
  float* sg = sh;
  float* sb = sh + cols;
  for (int c = threadIdx.x; c < 2 * cols; c += blockDim.x)
    sh[c] = 0.0f;
  __syncthreads();
  int lane = threadIdx.x % 32;
  for (int row = blockIdx.x * warps_per_block + threadIdx.x / 32; row < rows; row += gridDim.x * warps_per_block) {
    const T* xr = x + (long long)row * cols;
    const T* dyr = dy + (long long)row * cols;
    float mu = mean[row], rs = rstd[row];
    float a = 0.0f, b = 0.0f; // sums of dxhat and dxhat * xhat
    for (int c = lane; c < cols; c += 32) {
      float xh = (to_f32(xr[c]) - mu) * rs;
      float g = to_f32(dyr[c]);
      float dxh = g * to_f32(gamma[c]);
      a += dxh;
      b += dxh * xh;
      atomicAdd(sg + c, g * xh);
      atomicAdd(sb + c, g);
    }
    a = warp_sum(a) / cols;
    b = warp_sum(b) / cols;
    T* dxr = dx + (long long)row * cols;
    for (int c = lane; c < cols; c += 32) {
      float xh = (to_f32(xr[c]) - mu) * rs;
      float dxh = to_f32(dyr[c]) * to_f32(gamma[c]);
      dxr[c] = from_f32<T>(rs * (dxh - a - xh * b));
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    atomicAdd(dgamma + c, sg[c]);
    atomicAdd(dbeta + c, sb[c]);
  }
}

/// The backward for rows of at most 32 * CPL columns: each lane keeps its
/// columns' gamma and weight-gradient sums in registers across all its rows,
/// and adds them to shared memory once (not once per row).
template <typename T, int CPL>
__global__ void ln_backward_reg(T* dx, float* dgamma, float* dbeta, const T* dy, const T* x, const T* gamma,
                                const float* mean, const float* rstd, int rows, int cols) {
  extern __shared__ float sh[];
  float* sg = sh;
  float* sb = sh + cols;
  for (int c = threadIdx.x; c < 2 * cols; c += blockDim.x)
    sh[c] = 0.0f;
  int lane = threadIdx.x % 32;
  float gm[CPL], ag[CPL], ab[CPL];
#pragma unroll
  for (int i = 0; i < CPL; ++i) {
    int c = lane + 32 * i;
    gm[i] = c < cols ? to_f32(gamma[c]) : 0.0f;
    ag[i] = ab[i] = 0.0f;
  }
  __syncthreads();
  for (int row = blockIdx.x * warps_per_block + threadIdx.x / 32; row < rows; row += gridDim.x * warps_per_block) {
    const T* xr = x + (long long)row * cols;
    const T* dyr = dy + (long long)row * cols;
    float mu = mean[row], rs = rstd[row];
    float a = 0.0f, b = 0.0f;
#pragma unroll
    for (int i = 0; i < CPL; ++i) {
      int c = lane + 32 * i;
      if (c < cols) {
        float xh = (to_f32(xr[c]) - mu) * rs, g = to_f32(dyr[c]);
        a += g * gm[i];
        b += g * gm[i] * xh;
        ag[i] += g * xh;
        ab[i] += g;
      }
    }
    a = warp_sum(a) / cols;
    b = warp_sum(b) / cols;
    T* dxr = dx + (long long)row * cols;
#pragma unroll
    for (int i = 0; i < CPL; ++i) {
      int c = lane + 32 * i;
      if (c < cols) {
        float xh = (to_f32(xr[c]) - mu) * rs;
        dxr[c] = from_f32<T>(rs * (to_f32(dyr[c]) * gm[i] - a - xh * b));
      }
    }
  }
#pragma unroll
  for (int i = 0; i < CPL; ++i) {
    int c = lane + 32 * i;
    if (c < cols) {
      atomicAdd(sg + c, ag[i]);
      atomicAdd(sb + c, ab[i]);
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    atomicAdd(dgamma + c, sg[c]);
    atomicAdd(dbeta + c, sb[c]);
  }
}

status check_sizes(const char* what, int rows, int cols) {
  if (rows < 0 || cols <= 0)
    return status::failure(std::string{what} + ": bad sizes rows=" + std::to_string(rows) +
                           " cols=" + std::to_string(cols));
  if (cols > 6144)
    return status::failure(std::string{what} + ": cols=" + std::to_string(cols) +
                           " exceeds the 6144 the backward's shared memory holds");
  return {};
}

template <typename T>
status forward(T* y, float* mean, float* rstd, const T* x, const T* gamma, const T* beta, int rows, int cols, float eps,
               cudaStream_t s) {
  TROUPE_GPU_TRY(check_sizes("layer_norm_forward", rows, cols));
  if (rows == 0)
    return {};
  unsigned blocks = (rows + warps_per_block - 1) / warps_per_block;
  ln_forward<<<blocks, 32 * warps_per_block, 0, s>>>(y, mean, rstd, x, gamma, beta, rows, cols, eps);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

template <typename T>
status backward(T* dx, float* dgamma, float* dbeta, const T* dy, const T* x, const T* gamma, const float* mean,
                const float* rstd, int rows, int cols, cudaStream_t s) {
  TROUPE_GPU_TRY(check_sizes("layer_norm_backward", rows, cols));
  if (rows == 0)
    return {};
  int dev = 0, sms = 0;
  TROUPE_CUDA_CHECK(cudaGetDevice(&dev));
  TROUPE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  int needed = (rows + warps_per_block - 1) / warps_per_block;
  unsigned blocks = static_cast<unsigned>(needed < 2 * sms ? needed : 2 * sms);
  std::size_t smem = 2 * cols * sizeof(float);
  unsigned threads = 32 * warps_per_block;
  if (cols <= 256)
    ln_backward_reg<T, 8><<<blocks, threads, smem, s>>>(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, cols);
  else if (cols <= 512)
    ln_backward_reg<T, 16><<<blocks, threads, smem, s>>>(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, cols);
  else if (cols <= 768)
    ln_backward_reg<T, 24><<<blocks, threads, smem, s>>>(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, cols);
  else if (cols <= 1024)
    ln_backward_reg<T, 32><<<blocks, threads, smem, s>>>(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, cols);
  else
    ln_backward<<<blocks, threads, smem, s>>>(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, cols);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

} // namespace

using bf16 = __nv_bfloat16;

status layer_norm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                          int rows, int cols, float eps, cudaStream_t s) {
  return forward(y, mean, rstd, x, gamma, beta, rows, cols, eps, s);
}
status layer_norm_forward(bf16* y, float* mean, float* rstd, const bf16* x, const bf16* gamma, const bf16* beta,
                          int rows, int cols, float eps, cudaStream_t s) {
  return forward(y, mean, rstd, x, gamma, beta, rows, cols, eps, s);
}
status layer_norm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* gamma,
                           const float* mean, const float* rstd, int rows, int cols, cudaStream_t s) {
  return backward(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, cols, s);
}
status layer_norm_backward(bf16* dx, float* dgamma, float* dbeta, const bf16* dy, const bf16* x, const bf16* gamma,
                           const float* mean, const float* rstd, int rows, int cols, cudaStream_t s) {
  return backward(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, cols, s);
}

} // namespace troupe::gpu
