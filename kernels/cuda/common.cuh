// Device helpers shared by the CUDA kernels: bf16/f32 conversion, warp and
// block reductions, and launch-size arithmetic.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace troupe::gpu::detail {

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

/// Converts an f32 to the element type T (round to nearest even for bf16).
template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over a block of at most 1024 threads (a multiple of 32); every thread gets it.
/// `scratch` holds 32 floats of shared memory; the call synchronises the block twice.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads(); // scratch may still be read by a previous reduction
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

/// Max over a block, as block_sum.
__device__ __forceinline__ float block_max(float v, float* scratch) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

/// Loads and stores of V consecutive elements: one 16-byte access when V > 1
/// (the address must then be 16-byte aligned).
template <typename T, int V>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = to_f32(p[0]);
  } else {
    uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i)
      out[i] = to_f32(e[i]);
  }
}

template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[V]) {
  if constexpr (V == 1) {
    p[0] = from_f32<T>(in[0]);
  } else {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i)
      e[i] = from_f32<T>(in[i]);
    *reinterpret_cast<uint4*>(p) = raw;
  }
}

/// True when p is 16-byte aligned (or null), so vector accesses may use it.
__host__ __device__ inline bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

/// Blocks of `threads` covering `n` items, capped for grid-stride loops.
inline unsigned grid_for(std::int64_t n, int threads, std::int64_t cap = 65535LL * 32) {
  std::int64_t g = (n + threads - 1) / threads;
  if (g < 1)
    g = 1;
  return static_cast<unsigned>(g < cap ? g : cap);
}

} // namespace troupe::gpu::detail
