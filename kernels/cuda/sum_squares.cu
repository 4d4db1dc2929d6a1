// The Σ x² kernel: per-thread double sums, a block reduction, one atomic add per block.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sum_squares.hpp"

#include <string>

namespace troupe::gpu {

namespace {

using namespace detail;

constexpr int threads = 256;

__device__ __forceinline__ double warp_sum_double(double v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void sum_squares_kernel(double* acc, const float* x, std::int64_t n) {
  __shared__ double partial[threads / 32];
  double s = 0.0;
  for (std::int64_t i = blockIdx.x * (std::int64_t)blockDim.x + threadIdx.x; i < n;
       i += (std::int64_t)gridDim.x * blockDim.x) {
    double v = x[i];
    s += v * v;
  }
  s = warp_sum_double(s);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0)
    partial[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < threads / 32 ? partial[lane] : 0.0;
    s = warp_sum_double(s);
    if (lane == 0)
      atomicAdd(acc, s);
  }
}

} // namespace

status sum_squares(double* acc, const float* x, std::int64_t n, cudaStream_t stream) {
  if (n < 0)
    return status::failure("sum_squares: negative element count " + std::to_string(n));
  if (n == 0)
    return {};
  // A few blocks per SM keep the atomics few; each thread walks many elements.
  sum_squares_kernel<<<grid_for(n, threads, 1024), threads, 0, stream>>>(acc, x, n);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

} // namespace troupe::gpu
