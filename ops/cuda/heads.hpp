// Layout helpers for the GPU GPT: packed projections [B·T, ld] (row-major, a
// head's D columns side by side) to and from attention's [B, H, T, D], and the
// masking of a padded vocabulary's extra logit columns.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/check.hpp"

namespace troupe::ops::cuda {

/// Sizes of one move: `ld` is the row length of the packed side, `col` the first
/// column of the H·D block moved (0, C or 2C for q, k, v inside qkv [B·T, 3C]).
struct heads_shape {
  int batch = 0, heads = 0, seq_len = 0, head_dim = 0;
  int ld = 0, col = 0;
};

/// dst[b, h, t, d] = src[(b·T + t)·ld + col + h·D + d]. head_dim must be a multiple of 8.
gpu::status rows_to_heads(__nv_bfloat16* dst, const __nv_bfloat16* src, const heads_shape& s, cudaStream_t stream);
/// dst[(b·T + t)·ld + col + h·D + d] = src[b, h, t, d] (the inverse; other columns untouched).
gpu::status heads_to_rows(__nv_bfloat16* dst, const __nv_bfloat16* src, const heads_shape& s, cudaStream_t stream);

/// x[r, c] = value for r < rows and c in [col_begin, ld) of a row-major x [rows, ld].
gpu::status fill_tail_columns(__nv_bfloat16* x, int rows, int ld, int col_begin, float value, cudaStream_t stream);

} // namespace troupe::ops::cuda
