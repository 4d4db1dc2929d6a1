// Flash-style causal attention. bf16 with head_dim 64 or 128 goes to the
// tensor-core kernels (attention_mma.cu); f32, and head_dim 32, run here on
// CUDA cores: a block holds a tile of query rows (forward, dQ) or key rows
// (dK/dV) and streams the other side through shared memory in tiles of 32,
// one key (or query) per lane, with an online softmax in f32.
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/common.cuh"

#include <cmath>
#include <string>
#include <type_traits>

namespace troupe::gpu {

namespace {

using namespace detail;

constexpr int warps = 4;
constexpr int bc = 32; // keys (or queries) per streamed tile: one per lane
constexpr float log2e = 1.4426950408889634f;

/// The first key query `qi` of (batch·heads) row `bh` may attend: its document's
/// start, or 0 without document masks (attention_shape::doc_start).
__device__ __forceinline__ int first_key(const int* docs, int heads, int bh, int n, int qi) {
  return docs && qi < n ? docs[(long long)(bh / heads) * n + qi] : 0;
}

/// Rows each warp owns: fewer for wide heads so shared memory stays under 48 KB.
template <int D>
constexpr int rows_per_warp = D <= 64 ? 4 : 2;

template <typename T, int D>
__global__ void __launch_bounds__(warps * 32)
  attn_forward(T* o, float* lse, const T* q, const T* k, const T* v, int n, float scale, const int* docs, int heads) {
  constexpr int R = rows_per_warp<D>, BR = warps * R, E = D / 32;
  __shared__ float qs[BR][D];
  __shared__ float ks[bc][D + 1];
  __shared__ float vs[bc][D];
  __shared__ float ps[warps][R][bc];
  const long long base = (long long)blockIdx.y * n * D;
  const int q0 = blockIdx.x * BR, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float s2 = scale * log2e; // scores in log2 units
  for (int i = threadIdx.x; i < BR * D; i += blockDim.x) {
    int r = i / D, qi = q0 + r;
    qs[r][i % D] = qi < n ? to_f32(q[base + (long long)qi * D + i % D]) * s2 : 0.0f;
  }
  float m[R], l[R], acc[R][E];
  int lo[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    lo[r] = first_key(docs, heads, blockIdx.y, n, q0 + warp * R + r);
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e)
      acc[r][e] = 0.0f;
  }
  const int q_last = min(q0 + BR, n) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += bc) {
    __syncthreads();
    for (int i = threadIdx.x; i < bc * D; i += blockDim.x) {
      int j = i / D, kj = k0 + j;
      long long at = base + (long long)kj * D + i % D;
      ks[j][i % D] = kj < n ? to_f32(k[at]) : 0.0f;
      vs[j][i % D] = kj < n ? to_f32(v[at]) : 0.0f;
    }
    __syncthreads();
    float s[R];
#pragma unroll
    for (int r = 0; r < R; ++r)
      s[r] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < D; ++d) {
      float kd = ks[lane][d];
#pragma unroll
      for (int r = 0; r < R; ++r)
        s[r] += qs[warp * R + r][d] * kd;
    }
    const int kj = k0 + lane;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      int qi = q0 + warp * R + r;
      float sv = kj <= qi && kj >= lo[r] && kj < n ? s[r] : -INFINITY;
      float mn = fmaxf(m[r], warp_max(sv));
      float p = sv == -INFINITY ? 0.0f : exp2f(sv - mn);
      float corr = m[r] == -INFINITY ? 0.0f : exp2f(m[r] - mn);
      l[r] = l[r] * corr + warp_sum(p);
      m[r] = mn;
#pragma unroll
      for (int e = 0; e < E; ++e)
        acc[r][e] *= corr;
      ps[warp][r][lane] = p;
    }
    __syncwarp();
#pragma unroll 4
    for (int j = 0; j < bc; ++j) {
      float vv[E];
#pragma unroll
      for (int e = 0; e < E; ++e)
        vv[e] = vs[j][lane + 32 * e];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float pj = ps[warp][r][j];
#pragma unroll
        for (int e = 0; e < E; ++e)
          acc[r][e] += pj * vv[e];
      }
    }
    __syncwarp();
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    int qi = q0 + warp * R + r;
    if (qi >= n)
      continue;
    float inv = 1.0f / l[r];
#pragma unroll
    for (int e = 0; e < E; ++e)
      o[base + (long long)qi * D + lane + 32 * e] = from_f32<T>(acc[r][e] * inv);
    if (lane == 0)
      lse[(long long)blockIdx.y * n + qi] = (m[r] + log2f(l[r])) / log2e;
  }
}

/// delta[row] = dot(dout[row], o[row]): one warp per row.
template <typename T, int D>
__global__ void attn_delta(float* delta, const T* dout, const T* o, long long rows) {
  long long row = blockIdx.x * (long long)warps + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows)
    return;
  float s = 0.0f;
  for (int d = lane; d < D; d += 32)
    s += to_f32(dout[row * D + d]) * to_f32(o[row * D + d]);
  s = warp_sum(s);
  if (lane == 0)
    delta[row] = s;
}

template <typename T, int D>
__global__ void __launch_bounds__(warps * 32)
  attn_backward_dq(T* dq, const T* dout, const T* q, const T* k, const T* v, const float* lse, const float* delta,
                   int n, float scale, const int* docs, int heads) {
  constexpr int R = rows_per_warp<D>, BR = warps * R, E = D / 32;
  __shared__ float qs[BR][D];
  __shared__ float dos[BR][D];
  __shared__ float ks[bc][D + 1];
  __shared__ float vs[bc][D + 1];
  __shared__ float ds_s[warps][R][bc];
  const long long base = (long long)blockIdx.y * n * D;
  const int q0 = blockIdx.x * BR, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float s2 = scale * log2e;
  for (int i = threadIdx.x; i < BR * D; i += blockDim.x) {
    int r = i / D, qi = q0 + r;
    long long at = base + (long long)qi * D + i % D;
    qs[r][i % D] = qi < n ? to_f32(q[at]) * s2 : 0.0f;
    dos[r][i % D] = qi < n ? to_f32(dout[at]) : 0.0f;
  }
  float lse2[R], dl[R], acc[R][E];
  int lo[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    lo[r] = first_key(docs, heads, blockIdx.y, n, q0 + warp * R + r);
    int qi = min(q0 + warp * R + r, n - 1);
    lse2[r] = lse[(long long)blockIdx.y * n + qi] * log2e;
    dl[r] = delta[(long long)blockIdx.y * n + qi];
#pragma unroll
    for (int e = 0; e < E; ++e)
      acc[r][e] = 0.0f;
  }
  const int q_last = min(q0 + BR, n) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += bc) {
    __syncthreads();
    for (int i = threadIdx.x; i < bc * D; i += blockDim.x) {
      int j = i / D, kj = k0 + j;
      long long at = base + (long long)kj * D + i % D;
      ks[j][i % D] = kj < n ? to_f32(k[at]) : 0.0f;
      vs[j][i % D] = kj < n ? to_f32(v[at]) : 0.0f;
    }
    __syncthreads();
    float s[R], dp[R];
#pragma unroll
    for (int r = 0; r < R; ++r)
      s[r] = dp[r] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < D; ++d) {
      float kd = ks[lane][d], vd = vs[lane][d];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        s[r] += qs[warp * R + r][d] * kd;
        dp[r] += dos[warp * R + r][d] * vd;
      }
    }
    const int kj = k0 + lane;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      int qi = q0 + warp * R + r;
      float p = kj <= qi && kj >= lo[r] && kj < n && qi < n ? exp2f(s[r] - lse2[r]) : 0.0f;
      ds_s[warp][r][lane] = p * (dp[r] - dl[r]);
    }
    __syncwarp();
#pragma unroll 4
    for (int j = 0; j < bc; ++j) {
      float kk[E];
#pragma unroll
      for (int e = 0; e < E; ++e)
        kk[e] = ks[j][lane + 32 * e];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float dsj = ds_s[warp][r][j];
#pragma unroll
        for (int e = 0; e < E; ++e)
          acc[r][e] += dsj * kk[e];
      }
    }
    __syncwarp();
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    int qi = q0 + warp * R + r;
    if (qi >= n)
      continue;
#pragma unroll
    for (int e = 0; e < E; ++e)
      dq[base + (long long)qi * D + lane + 32 * e] = from_f32<T>(acc[r][e] * scale);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(warps * 32)
  attn_backward_dkv(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                    const float* delta, int n, float scale, const int* docs, int heads) {
  constexpr int R = rows_per_warp<D>, BR = warps * R, E = D / 32;
  __shared__ float ks[BR][D];
  __shared__ float vs[BR][D];
  __shared__ float qt[bc][D + 1];
  __shared__ float dot[bc][D + 1];
  __shared__ float lse2_t[bc], dl_t[bc];
  __shared__ int lo_t[bc];
  __shared__ float p_s[warps][R][bc];
  __shared__ float ds_s[warps][R][bc];
  const long long base = (long long)blockIdx.y * n * D;
  const long long row0 = (long long)blockIdx.y * n;
  const int k0 = blockIdx.x * BR, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float s2 = scale * log2e;
  for (int i = threadIdx.x; i < BR * D; i += blockDim.x) {
    int r = i / D, kj = k0 + r;
    long long at = base + (long long)kj * D + i % D;
    ks[r][i % D] = kj < n ? to_f32(k[at]) * s2 : 0.0f;
    vs[r][i % D] = kj < n ? to_f32(v[at]) : 0.0f;
  }
  float dka[R][E], dva[R][E];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int e = 0; e < E; ++e)
      dka[r][e] = dva[r][e] = 0.0f;
  for (int i0 = k0 / bc * bc; i0 < n; i0 += bc) {
    __syncthreads();
    for (int i = threadIdx.x; i < bc * D; i += blockDim.x) {
      int j = i / D, qi = i0 + j;
      long long at = base + (long long)qi * D + i % D;
      qt[j][i % D] = qi < n ? to_f32(q[at]) : 0.0f;
      dot[j][i % D] = qi < n ? to_f32(dout[at]) : 0.0f;
    }
    if (threadIdx.x < bc) {
      int qi = i0 + threadIdx.x;
      lse2_t[threadIdx.x] = qi < n ? lse[row0 + qi] * log2e : 0.0f;
      dl_t[threadIdx.x] = qi < n ? delta[row0 + qi] : 0.0f;
      lo_t[threadIdx.x] = first_key(docs, heads, blockIdx.y, n, qi);
    }
    __syncthreads();
    float s[R], dp[R];
#pragma unroll
    for (int r = 0; r < R; ++r)
      s[r] = dp[r] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < D; ++d) {
      float qd = qt[lane][d], dd = dot[lane][d];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        s[r] += ks[warp * R + r][d] * qd;
        dp[r] += vs[warp * R + r][d] * dd;
      }
    }
    const int qi = i0 + lane;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      int kj = k0 + warp * R + r;
      float p = kj <= qi && kj >= lo_t[lane] && qi < n && kj < n ? exp2f(s[r] - lse2_t[lane]) : 0.0f;
      p_s[warp][r][lane] = p;
      ds_s[warp][r][lane] = p * (dp[r] - dl_t[lane]);
    }
    __syncwarp();
#pragma unroll 4
    for (int j = 0; j < bc; ++j) {
      float qq[E], gg[E];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        qq[e] = qt[j][lane + 32 * e];
        gg[e] = dot[j][lane + 32 * e];
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float pj = p_s[warp][r][j], dsj = ds_s[warp][r][j];
#pragma unroll
        for (int e = 0; e < E; ++e) {
          dva[r][e] += pj * gg[e];
          dka[r][e] += dsj * qq[e];
        }
      }
    }
    __syncwarp();
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    int kj = k0 + warp * R + r;
    if (kj >= n)
      continue;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      long long at = base + (long long)kj * D + lane + 32 * e;
      dk[at] = from_f32<T>(dka[r][e] * scale);
      dv[at] = from_f32<T>(dva[r][e]);
    }
  }
}

status check(const char* what, const attention_shape& s) {
  if (s.batch < 0 || s.heads < 0 || s.seq_len < 0 || !(s.head_dim == 32 || s.head_dim == 64 || s.head_dim == 128))
    return status::failure(std::string{what} + ": unsupported shape batch=" + std::to_string(s.batch) +
                           " heads=" + std::to_string(s.heads) + " seq_len=" + std::to_string(s.seq_len) +
                           " head_dim=" + std::to_string(s.head_dim) + " (head_dim must be 32, 64 or 128)");
  if ((long long)s.batch * s.heads > 65535)
    return status::failure(std::string{what} + ": batch*heads exceeds 65535");
  return {};
}

float scale_of(const attention_shape& s) {
  return s.scale > 0.0f ? s.scale : 1.0f / std::sqrt((float)s.head_dim);
}

template <typename T, int D>
status forward_d(T* o, float* lse, const T* q, const T* k, const T* v, const attention_shape& s, cudaStream_t st) {
  constexpr int BR = warps * rows_per_warp<D>;
  dim3 grid((s.seq_len + BR - 1) / BR, s.batch * s.heads);
  attn_forward<T, D><<<grid, warps * 32, 0, st>>>(o, lse, q, k, v, s.seq_len, scale_of(s), s.doc_start, s.heads);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

template <typename T, int D>
status backward_d(T* dq, T* dk, T* dv, float* workspace, const T* dout, const T* q, const T* k, const T* v, const T* o,
                  const float* lse, const attention_shape& s, cudaStream_t st) {
  constexpr int BR = warps * rows_per_warp<D>;
  long long rows = (long long)s.batch * s.heads * s.seq_len;
  float* dq_acc = workspace; // rows * D, used by the tensor-core path
  float* delta = workspace + rows * D;
  attn_delta<T, D><<<grid_for(rows, warps), warps * 32, 0, st>>>(delta, dout, o, rows);
  TROUPE_CUDA_CHECK_LAUNCH();
  float sc = scale_of(s);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const void* ptrs[] = {dq, dk, dv, dout, q, k, v, workspace};
    if (!s.doc_start && attention_mma_supported(D, ptrs, 8))
      return attention_mma_backward(dq, dk, dv, dq_acc, delta, dout, q, k, v, lse, s.batch * s.heads, s.seq_len, D, sc,
                                    st);
  }
  dim3 grid((s.seq_len + BR - 1) / BR, s.batch * s.heads);
  attn_backward_dq<T, D>
    <<<grid, warps * 32, 0, st>>>(dq, dout, q, k, v, lse, delta, s.seq_len, sc, s.doc_start, s.heads);
  TROUPE_CUDA_CHECK_LAUNCH();
  attn_backward_dkv<T, D>
    <<<grid, warps * 32, 0, st>>>(dk, dv, dout, q, k, v, lse, delta, s.seq_len, sc, s.doc_start, s.heads);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

template <typename T>
status forward(T* o, float* lse, const T* q, const T* k, const T* v, const attention_shape& s, cudaStream_t st) {
  TROUPE_GPU_TRY(check("attention_forward", s));
  if ((long long)s.batch * s.heads * s.seq_len == 0)
    return {};
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const void* ptrs[] = {o, q, k, v};
    if (!s.doc_start && attention_mma_supported(s.head_dim, ptrs, 4))
      return attention_mma_forward(o, lse, q, k, v, s.batch * s.heads, s.seq_len, s.head_dim, scale_of(s), st);
  }
  switch (s.head_dim) {
  case 32:
    return forward_d<T, 32>(o, lse, q, k, v, s, st);
  case 64:
    return forward_d<T, 64>(o, lse, q, k, v, s, st);
  default:
    return forward_d<T, 128>(o, lse, q, k, v, s, st);
  }
}

template <typename T>
status backward(T* dq, T* dk, T* dv, float* workspace, const T* dout, const T* q, const T* k, const T* v, const T* o,
                const float* lse, const attention_shape& s, cudaStream_t st) {
  TROUPE_GPU_TRY(check("attention_backward", s));
  if ((long long)s.batch * s.heads * s.seq_len == 0)
    return {};
  switch (s.head_dim) {
  case 32:
    return backward_d<T, 32>(dq, dk, dv, workspace, dout, q, k, v, o, lse, s, st);
  case 64:
    return backward_d<T, 64>(dq, dk, dv, workspace, dout, q, k, v, o, lse, s, st);
  default:
    return backward_d<T, 128>(dq, dk, dv, workspace, dout, q, k, v, o, lse, s, st);
  }
}

} // namespace

using bf16 = __nv_bfloat16;

status attention_forward(float* o, float* lse, const float* q, const float* k, const float* v, const attention_shape& s,
                         cudaStream_t st) {
  return forward(o, lse, q, k, v, s, st);
}
status attention_forward(bf16* o, float* lse, const bf16* q, const bf16* k, const bf16* v, const attention_shape& s,
                         cudaStream_t st) {
  return forward(o, lse, q, k, v, s, st);
}
std::size_t attention_backward_workspace(const attention_shape& s) {
  return (std::size_t)s.batch * s.heads * s.seq_len * (s.head_dim + 1);
}

status attention_backward(float* dq, float* dk, float* dv, float* workspace, const float* dout, const float* q,
                          const float* k, const float* v, const float* o, const float* lse, const attention_shape& s,
                          cudaStream_t st) {
  return backward(dq, dk, dv, workspace, dout, q, k, v, o, lse, s, st);
}
status attention_backward(bf16* dq, bf16* dk, bf16* dv, float* workspace, const bf16* dout, const bf16* q,
                          const bf16* k, const bf16* v, const bf16* o, const float* lse, const attention_shape& s,
                          cudaStream_t st) {
  return backward(dq, dk, dv, workspace, dout, q, k, v, o, lse, s, st);
}

} // namespace troupe::gpu
