// Head layout moves for the GPU GPT, 16 bytes (8 bf16) per thread.
#include "ops/cuda/heads.hpp"

#include <cstdint>

namespace troupe::ops::cuda {

namespace {

/// One thread moves 8 consecutive d of one (b, h, t); `to_heads` picks the direction.
template <bool to_heads>
__global__ void move_heads(__nv_bfloat16* dst, const __nv_bfloat16* src, heads_shape s, std::int64_t chunks) {
  std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= chunks)
    return;
  const int per_row = s.head_dim / 8;
  const int dc = int(i % per_row);
  std::int64_t r = i / per_row; // index over (b, h, t) in [B, H, T] order
  const int t = int(r % s.seq_len);
  r /= s.seq_len;
  const int h = int(r % s.heads);
  const std::int64_t b = r / s.heads;
  const std::int64_t packed = (b * s.seq_len + t) * s.ld + s.col + std::int64_t(h) * s.head_dim + dc * 8;
  const std::int64_t split = i * 8;
  if constexpr (to_heads)
    *reinterpret_cast<uint4*>(dst + split) = *reinterpret_cast<const uint4*>(src + packed);
  else
    *reinterpret_cast<uint4*>(dst + packed) = *reinterpret_cast<const uint4*>(src + split);
}

template <bool to_heads>
gpu::status launch(__nv_bfloat16* dst, const __nv_bfloat16* src, const heads_shape& s, cudaStream_t stream) {
  if (s.head_dim % 8 != 0 || s.ld % 8 != 0 || s.col % 8 != 0)
    return gpu::status::failure("ops/cuda/heads: head_dim, ld and col must be multiples of 8");
  const std::int64_t chunks = std::int64_t(s.batch) * s.heads * s.seq_len * (s.head_dim / 8);
  if (chunks == 0)
    return {};
  const int threads = 256;
  move_heads<to_heads><<<unsigned((chunks + threads - 1) / threads), threads, 0, stream>>>(dst, src, s, chunks);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

__global__ void fill_tail(__nv_bfloat16* x, int rows, int ld, int col_begin, float value) {
  const int width = ld - col_begin;
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= std::int64_t(rows) * width)
    return;
  x[(i / width) * ld + col_begin + i % width] = __float2bfloat16_rn(value);
}

} // namespace

gpu::status fill_tail_columns(__nv_bfloat16* x, int rows, int ld, int col_begin, float value, cudaStream_t stream) {
  const std::int64_t n = std::int64_t(rows) * (ld - col_begin);
  if (n <= 0)
    return {};
  fill_tail<<<unsigned((n + 255) / 256), 256, 0, stream>>>(x, rows, ld, col_begin, value);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

gpu::status rows_to_heads(__nv_bfloat16* dst, const __nv_bfloat16* src, const heads_shape& s, cudaStream_t stream) {
  return launch<true>(dst, src, s, stream);
}

gpu::status heads_to_rows(__nv_bfloat16* dst, const __nv_bfloat16* src, const heads_shape& s, cudaStream_t stream) {
  return launch<false>(dst, src, s, stream);
}

} // namespace troupe::ops::cuda
