// Bias add and bias gradient kernels.
#include "kernels/cuda/bias.hpp"
#include "kernels/cuda/common.cuh"

namespace troupe::gpu {

namespace {

using namespace detail;

template <typename T>
__global__ void bias_add_kernel(T* y, const T* b, long long total, int n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = from_f32<T>(to_f32(y[i]) + to_f32(b[i % n]));
}

/// Block (32, 8): 32 columns, 8 row lanes; grid.y splits the rows into chunks.
template <typename T>
__global__ void bias_grad_kernel(float* db, const T* dy, int m, int n) {
  __shared__ float part[8][33];
  int col = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  if (col < n)
    for (int row = blockIdx.y * 8 + threadIdx.y; row < m; row += gridDim.y * 8)
      acc += to_f32(dy[(long long)row * n + col]);
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    float s = 0.0f;
    for (int r = 0; r < 8; ++r)
      s += part[r][threadIdx.x];
    atomicAdd(db + col, s);
  }
}

template <typename T>
status add(T* y, const T* b, int m, int n, cudaStream_t stream) {
  long long total = (long long)m * n;
  if (total == 0)
    return {};
  bias_add_kernel<<<grid_for(total, 256), 256, 0, stream>>>(y, b, total, n);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

template <typename T>
status grad(float* db, const T* dy, int m, int n, cudaStream_t stream) {
  if (m == 0 || n == 0)
    return {};
  int chunks = (m + 255) / 256;
  dim3 grid((n + 31) / 32, chunks < 64 ? chunks : 64);
  bias_grad_kernel<<<grid, dim3(32, 8), 0, stream>>>(db, dy, m, n);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

} // namespace

status bias_add(float* y, const float* b, int m, int n, cudaStream_t s) {
  return add(y, b, m, n, s);
}
status bias_add(__nv_bfloat16* y, const __nv_bfloat16* b, int m, int n, cudaStream_t s) {
  return add(y, b, m, n, s);
}
status bias_grad(float* db, const float* dy, int m, int n, cudaStream_t s) {
  return grad(db, dy, m, n, s);
}
status bias_grad(float* db, const __nv_bfloat16* dy, int m, int n, cudaStream_t s) {
  return grad(db, dy, m, n, s);
}

} // namespace troupe::gpu
