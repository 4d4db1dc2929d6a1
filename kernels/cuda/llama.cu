// Llama kernels: RMSNorm with one warp per row (weight gradients summed per block
// in shared memory, added once), SwiGLU and RoPE as grid-stride element loops.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/llama.hpp"

#include <string>

namespace troupe::gpu {

namespace {

using namespace detail;

constexpr int warps_per_block = 8;

__global__ void rms_forward(float* y, float* rstd, const float* x, const float* w, int rows, int cols, float eps) {
  int lane = threadIdx.x % 32;
  int row = blockIdx.x * warps_per_block + threadIdx.x / 32;
  if (row >= rows)
    return;
  const float* xr = x + (long long)row * cols;
  float s = 0.0f;
  for (int c = lane; c < cols; c += 32)
    s += xr[c] * xr[c];
  float rs = rsqrtf(warp_sum(s) / cols + eps);
  float* yr = y + (long long)row * cols;
  for (int c = lane; c < cols; c += 32)
    yr[c] = xr[c] * rs * w[c];
  if (lane == 0)
    rstd[row] = rs;
}

/// Dynamic shared memory: cols floats (dw's partial sums).
__global__ void rms_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                             int rows, int cols) {
  extern __shared__ float sw[];
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    sw[c] = 0.0f;
  __syncthreads();
  int lane = threadIdx.x % 32;
  for (int row = blockIdx.x * warps_per_block + threadIdx.x / 32; row < rows; row += gridDim.x * warps_per_block) {
    const float* xr = x + (long long)row * cols;
    const float* dyr = dy + (long long)row * cols;
    float rs = rstd[row], gx = 0.0f;
    for (int c = lane; c < cols; c += 32) {
      gx += dyr[c] * w[c] * xr[c];
      atomicAdd(sw + c, dyr[c] * xr[c] * rs);
    }
    float k = rs * rs * rs * warp_sum(gx) / cols;
    float* dxr = dx + (long long)row * cols;
    for (int c = lane; c < cols; c += 32)
      dxr[c] = rs * dyr[c] * w[c] - xr[c] * k;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    atomicAdd(dw + c, sw[c]);
}

__device__ __forceinline__ float sigmoid(float g) {
  return 1.0f / (1.0f + __expf(-g));
}

__global__ void swiglu_fwd(float* y, const float* gu, std::int64_t n, int hidden) {
  for (std::int64_t i = blockIdx.x * (std::int64_t)blockDim.x + threadIdx.x; i < n;
       i += (std::int64_t)gridDim.x * blockDim.x) {
    std::int64_t r = i / hidden, c = i % hidden;
    float g = gu[r * 2 * hidden + c], u = gu[r * 2 * hidden + hidden + c];
    y[i] = g * sigmoid(g) * u;
  }
}

__global__ void swiglu_bwd(float* dgu, const float* dy, const float* gu, std::int64_t n, int hidden) {
  for (std::int64_t i = blockIdx.x * (std::int64_t)blockDim.x + threadIdx.x; i < n;
       i += (std::int64_t)gridDim.x * blockDim.x) {
    std::int64_t r = i / hidden, c = i % hidden, k = r * 2 * hidden + c;
    float g = gu[k], u = gu[k + hidden], s = sigmoid(g), d = dy[i];
    dgu[k] = d * u * s * (1.0f + g * (1.0f - s));
    dgu[k + hidden] = d * g * s;
  }
}

/// One thread per (row, head, pair).
__global__ void rope_kernel(float* x, std::int64_t n, std::int64_t ld, int heads, int half, const std::int32_t* pos,
                            const float* cos, const float* sin, float sign) {
  for (std::int64_t i = blockIdx.x * (std::int64_t)blockDim.x + threadIdx.x; i < n;
       i += (std::int64_t)gridDim.x * blockDim.x) {
    std::int64_t pair = i % half, h = (i / half) % heads, r = i / ((std::int64_t)half * heads);
    float c = cos[(std::int64_t)pos[r] * half + pair], s = sign * sin[(std::int64_t)pos[r] * half + pair];
    float* a = x + r * ld + h * 2 * half + pair;
    float va = a[0], vb = a[half];
    a[0] = va * c - vb * s;
    a[half] = vb * c + va * s;
  }
}

status check_rows(const char* op, std::int64_t rows, std::int64_t cols) {
  if (rows < 0 || cols <= 0)
    return status::failure(std::string(op) + ": bad shape " + std::to_string(rows) + " x " + std::to_string(cols));
  return {};
}

} // namespace

status rms_norm_forward(float* y, float* rstd, const float* x, const float* w, int rows, int cols, float eps,
                        cudaStream_t stream) {
  if (auto s = check_rows("rms_norm_forward", rows, cols); !s.ok() || rows == 0)
    return s;
  rms_forward<<<(rows + warps_per_block - 1) / warps_per_block, 32 * warps_per_block, 0, stream>>>(y, rstd, x, w, rows,
                                                                                                   cols, eps);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

status rms_norm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                         int rows, int cols, cudaStream_t stream) {
  if (auto s = check_rows("rms_norm_backward", rows, cols); !s.ok() || rows == 0)
    return s;
  const int blocks = std::min(1024, (rows + warps_per_block - 1) / warps_per_block);
  rms_backward<<<blocks, 32 * warps_per_block, std::size_t(cols) * sizeof(float), stream>>>(dx, dw, dy, x, w, rstd,
                                                                                            rows, cols);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

status swiglu_forward(float* y, const float* gu, std::int64_t rows, int hidden, cudaStream_t stream) {
  if (auto s = check_rows("swiglu_forward", rows, hidden); !s.ok() || rows == 0)
    return s;
  const std::int64_t n = rows * hidden;
  swiglu_fwd<<<grid_for(n, 256), 256, 0, stream>>>(y, gu, n, hidden);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

status swiglu_backward(float* dgu, const float* dy, const float* gu, std::int64_t rows, int hidden,
                       cudaStream_t stream) {
  if (auto s = check_rows("swiglu_backward", rows, hidden); !s.ok() || rows == 0)
    return s;
  const std::int64_t n = rows * hidden;
  swiglu_bwd<<<grid_for(n, 256), 256, 0, stream>>>(dgu, dy, gu, n, hidden);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

status rope_rotate(float* x, std::int64_t rows, std::int64_t ld, int heads, int head_dim, const std::int32_t* pos,
                   const float* cos, const float* sin, bool inverse, cudaStream_t stream) {
  if (head_dim % 2 != 0 || heads <= 0 || ld < (std::int64_t)heads * head_dim)
    return status::failure("rope_rotate: head_dim " + std::to_string(head_dim) + " must be even and heads fit in ld");
  if (auto s = check_rows("rope_rotate", rows, head_dim); !s.ok() || rows == 0)
    return s;
  const std::int64_t n = rows * heads * (head_dim / 2);
  rope_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, n, ld, heads, head_dim / 2, pos, cos, sin,
                                                    inverse ? -1.0f : 1.0f);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

} // namespace troupe::gpu
