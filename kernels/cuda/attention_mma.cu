// Tensor-core flash attention (FlashAttention-2 layout of work): each warp owns
// 16 rows, a block 64; the other side streams through shared memory in tiles
// of 64. Fragment layouts are those of PTX mma.m16n8k16 (row.col): lane = 4g + t.
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/common.cuh"

#include <cstdint>

namespace troupe::gpu::detail {

namespace {

using bf16 = __nv_bfloat16;
using u32 = std::uint32_t;

constexpr int tile = 64;      // rows per block and streamed rows per step
constexpr int nwarps = 4;     // 16 rows each
constexpr int pad = 8;        // bf16 of padding per shared row: conflict-free fragment loads
constexpr float log2e = 1.4426950408889634f;

__device__ __forceinline__ void mma(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 ld32(const bf16* p) { return *reinterpret_cast<const u32*>(p); }

__device__ __forceinline__ u32 pack(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<u32*>(&h);
}

/// Copies rows [r0, r0+tile) of a [n, D] matrix into shared [tile][D+pad], zeros past n.
template <int D>
__device__ __forceinline__ void load_rows(bf16* dst, const bf16* src, int r0, int n) {
  constexpr int chunks = D / 8;
  for (int i = threadIdx.x; i < tile * chunks; i += blockDim.x) {
    int r = i / chunks, c = (i % chunks) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + r < n)
      v = *reinterpret_cast<const uint4*>(src + (long long)(r0 + r) * D + c);
    *reinterpret_cast<uint4*>(dst + r * (D + pad) + c) = v;
  }
}

/// Copies rows [r0, r0+tile) transposed into shared [D][tile+pad], zeros past n.
template <int D>
__device__ __forceinline__ void load_rows_t(bf16* dst, const bf16* src, int r0, int n) {
  constexpr int chunks = D / 8;
  for (int i = threadIdx.x; i < tile * chunks; i += blockDim.x) {
    int r = i % tile, c = (i / tile) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + r < n)
      v = *reinterpret_cast<const uint4*>(src + (long long)(r0 + r) * D + c);
    const bf16* e = reinterpret_cast<const bf16*>(&v);
#pragma unroll
    for (int j = 0; j < 8; ++j)
      dst[(c + j) * (tile + pad) + r] = e[j];
  }
}

/// A-operand fragments of the warp's 16 rows (row0) of a shared [.][D+pad] tile.
template <int D>
__device__ __forceinline__ void load_a(u32 (&f)[D / 16][4], const bf16* s, int row0, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const bf16* p = s + (row0 + g) * (D + pad) + kk * 16 + 2 * t;
    f[kk][0] = ld32(p);
    f[kk][1] = ld32(p + 8 * (D + pad));
    f[kk][2] = ld32(p + 8);
    f[kk][3] = ld32(p + 8 * (D + pad) + 8);
  }
}

/// acc[j] (16 x 64 scores) = A (16 x D fragments) times B^T, B a shared [64][D+pad] tile.
template <int D>
__device__ __forceinline__ void scores(float (&acc)[8][4], const u32 (&a)[D / 16][4], const bf16* b, int g, int t) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const bf16* p = b + (j * 8 + g) * (D + pad) + kk * 16 + 2 * t;
      mma(acc[j], a[kk], ld32(p), ld32(p + 8));
    }
  }
}

/// acc (16 x D) += P (16 x 64, as score fragments) times B, B given transposed as shared [D][64+pad].
template <int D>
__device__ __forceinline__ void accumulate_pv(float (&acc)[D / 8][4], const float (&p)[8][4], const bf16* bt, int g,
                                              int t) {
#pragma unroll
  for (int kk = 0; kk < tile / 16; ++kk) {
    u32 a[4] = {pack(p[2 * kk][0], p[2 * kk][1]), pack(p[2 * kk][2], p[2 * kk][3]),
                pack(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      const bf16* q = bt + (dn * 8 + g) * (tile + pad) + kk * 16 + 2 * t;
      mma(acc[dn], a, ld32(q), ld32(q + 8));
    }
  }
}

template <int D>
__global__ void __launch_bounds__(nwarps * 32) fwd_kernel(bf16* o, float* lse, const bf16* q, const bf16* k,
                                                         const bf16* v, int n, float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + tile * (D + pad);
  bf16* vt = ks + tile * (D + pad);
  const long long base = (long long)blockIdx.y * n * D;
  const int q0 = blockIdx.x * tile, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float c = scale * log2e;
  load_rows<D>(qs, q + base, q0, n);
  __syncthreads();
  u32 qf[D / 16][4];
  load_a<D>(qf, qs, warp * 16, g, t);
  float acc[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const int last = min(q0 + tile, n) - 1;
  for (int k0 = 0; k0 <= last; k0 += tile) {
    __syncthreads();
    load_rows<D>(ks, k + base, k0, n);
    load_rows_t<D>(vt, v + base, k0, n);
    __syncthreads();
    float s[8][4];
    scores<D>(s, qf, ks, g, t);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          int col = k0 + j * 8 + 2 * t + e;
          float x = col <= rows[h] && col < n ? s[j][2 * h + e] * c : -INFINITY;
          s[j][2 * h + e] = x;
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      float mn = fmaxf(m[h], mx);
      float mu = mn == -INFINITY ? 0.0f : mn;
      float corr = exp2f(m[h] - mu); // 0 while the row has seen nothing
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float p = exp2f(s[j][2 * h + e] - mu);
          s[j][2 * h + e] = p;
          sum += p;
        }
      l[h] = l[h] * corr + sum;
      m[h] = mn;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        acc[dn][2 * h] *= corr;
        acc[dn][2 * h + 1] *= corr;
      }
    }
    accumulate_pv<D>(acc, s, vt, g, t);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (rows[h] >= n)
      continue;
    float inv = 1.0f / sum;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<u32*>(o + base + (long long)rows[h] * D + dn * 8 + 2 * t) =
          pack(acc[dn][2 * h] * inv, acc[dn][2 * h + 1] * inv);
    if (t == 0)
      lse[(long long)blockIdx.y * n + rows[h]] = (m[h] + log2f(sum)) / log2e;
  }
}

template <int D>
__global__ void __launch_bounds__(nwarps * 32) dq_kernel(bf16* dq, const bf16* dout, const bf16* q, const bf16* k,
                                                        const bf16* v, const float* lse, const float* delta, int n,
                                                        float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);   // [64][D+pad]; Q staging at first
  bf16* vs = ks + tile * (D + pad);            // [64][D+pad]; dO staging at first
  bf16* kt = vs + tile * (D + pad);            // [D][64+pad]
  const long long base = (long long)blockIdx.y * n * D, row_base = (long long)blockIdx.y * n;
  const int q0 = blockIdx.x * tile, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float c = scale * log2e;
  load_rows<D>(ks, q + base, q0, n);
  load_rows<D>(vs, dout + base, q0, n);
  __syncthreads();
  u32 qf[D / 16][4], df[D / 16][4];
  load_a<D>(qf, ks, warp * 16, g, t);
  load_a<D>(df, vs, warp * 16, g, t);
  const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float lse2[2], dl[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int r = min(rows[h], n - 1);
    lse2[h] = lse[row_base + r] * log2e;
    dl[h] = delta[row_base + r];
  }
  float acc[D / 8][4] = {};
  const int last = min(q0 + tile, n) - 1;
  for (int k0 = 0; k0 <= last; k0 += tile) {
    __syncthreads();
    load_rows<D>(ks, k + base, k0, n);
    load_rows<D>(vs, v + base, k0, n);
    load_rows_t<D>(kt, k + base, k0, n);
    __syncthreads();
    float s[8][4], dp[8][4];
    scores<D>(s, qf, ks, g, t);
    scores<D>(dp, df, vs, g, t);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int h = e / 2, col = k0 + j * 8 + 2 * t + (e & 1);
        float p = col <= rows[h] && col < n && rows[h] < n ? exp2f(s[j][e] * c - lse2[h]) : 0.0f;
        s[j][e] = p * (dp[j][e] - dl[h]);
      }
    accumulate_pv<D>(acc, s, kt, g, t);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (rows[h] >= n)
      continue;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<u32*>(dq + base + (long long)rows[h] * D + dn * 8 + 2 * t) =
          pack(acc[dn][2 * h] * scale, acc[dn][2 * h + 1] * scale);
  }
}

template <int D>
__global__ void __launch_bounds__(nwarps * 32) dkv_kernel(bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                                                         const bf16* k, const bf16* v, const float* lse,
                                                         const float* delta, int n, float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);   // [64][D+pad]; K staging at first
  bf16* ds = qs + tile * (D + pad);            // [64][D+pad] dO; V staging at first
  bf16* qt = ds + tile * (D + pad);            // [D][64+pad]
  bf16* dt = qt + D * (tile + pad);            // [D][64+pad]
  float* lse2_s = reinterpret_cast<float*>(dt + D * (tile + pad));
  float* dl_s = lse2_s + tile;
  const long long base = (long long)blockIdx.y * n * D, row_base = (long long)blockIdx.y * n;
  const int k0 = blockIdx.x * tile, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float c = scale * log2e;
  load_rows<D>(qs, k + base, k0, n);
  load_rows<D>(ds, v + base, k0, n);
  __syncthreads();
  u32 kf[D / 16][4], vf[D / 16][4];
  load_a<D>(kf, qs, warp * 16, g, t);
  load_a<D>(vf, ds, warp * 16, g, t);
  const int keys[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  float dka[D / 8][4] = {}, dva[D / 8][4] = {};
  for (int i0 = k0; i0 < n; i0 += tile) {
    __syncthreads();
    load_rows<D>(qs, q + base, i0, n);
    load_rows<D>(ds, dout + base, i0, n);
    load_rows_t<D>(qt, q + base, i0, n);
    load_rows_t<D>(dt, dout + base, i0, n);
    for (int i = threadIdx.x; i < tile; i += blockDim.x) {
      bool in = i0 + i < n;
      lse2_s[i] = in ? lse[row_base + i0 + i] * log2e : 0.0f;
      dl_s[i] = in ? delta[row_base + i0 + i] : 0.0f;
    }
    __syncthreads();
    float s[8][4], dp[8][4];
    scores<D>(s, kf, qs, g, t);   // S^T: keys x queries
    scores<D>(dp, vf, ds, g, t);  // dP^T
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int h = e / 2, ci = j * 8 + 2 * t + (e & 1), col = i0 + ci;
        float p = keys[h] <= col && col < n && keys[h] < n ? exp2f(s[j][e] * c - lse2_s[ci]) : 0.0f;
        s[j][e] = p;
        dp[j][e] = p * (dp[j][e] - dl_s[ci]);
      }
    accumulate_pv<D>(dva, s, dt, g, t);
    accumulate_pv<D>(dka, dp, qt, g, t);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (keys[h] >= n)
      continue;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      long long at = base + (long long)keys[h] * D + dn * 8 + 2 * t;
      *reinterpret_cast<u32*>(dk + at) = pack(dka[dn][2 * h] * scale, dka[dn][2 * h + 1] * scale);
      *reinterpret_cast<u32*>(dv + at) = pack(dva[dn][2 * h], dva[dn][2 * h + 1]);
    }
  }
}

template <int D>
constexpr std::size_t fwd_smem = (2 * tile * (D + pad) + D * (tile + pad)) * sizeof(bf16);
template <int D>
constexpr std::size_t dkv_smem = (2 * tile * (D + pad) + 2 * D * (tile + pad)) * sizeof(bf16) + 2 * tile * sizeof(float);

template <typename K>
status allow_smem(K kernel, std::size_t bytes) {
  TROUPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  return {};
}

template <int D>
status forward_d(bf16* o, float* lse, const bf16* q, const bf16* k, const bf16* v, int bh, int n, float scale,
                 cudaStream_t s) {
  TROUPE_GPU_TRY(allow_smem(fwd_kernel<D>, fwd_smem<D>));
  fwd_kernel<D><<<dim3((n + tile - 1) / tile, bh), nwarps * 32, fwd_smem<D>, s>>>(o, lse, q, k, v, n, scale);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

template <int D>
status backward_d(bf16* dq, bf16* dk, bf16* dv, const float* delta, const bf16* dout, const bf16* q, const bf16* k,
                  const bf16* v, const float* lse, int bh, int n, float scale, cudaStream_t s) {
  dim3 grid((n + tile - 1) / tile, bh);
  TROUPE_GPU_TRY(allow_smem(dq_kernel<D>, fwd_smem<D>));
  dq_kernel<D><<<grid, nwarps * 32, fwd_smem<D>, s>>>(dq, dout, q, k, v, lse, delta, n, scale);
  TROUPE_CUDA_CHECK_LAUNCH();
  TROUPE_GPU_TRY(allow_smem(dkv_kernel<D>, dkv_smem<D>));
  dkv_kernel<D><<<grid, nwarps * 32, dkv_smem<D>, s>>>(dk, dv, dout, q, k, v, lse, delta, n, scale);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

} // namespace

bool attention_mma_supported(int head_dim, const void* const* ptrs, int count) {
  if (head_dim != 64 && head_dim != 128)
    return false;
  for (int i = 0; i < count; ++i)
    if (reinterpret_cast<std::uintptr_t>(ptrs[i]) % 16 != 0)
      return false;
  return true;
}

status attention_mma_forward(bf16* o, float* lse, const bf16* q, const bf16* k, const bf16* v, int bh, int n, int d,
                             float scale, cudaStream_t s) {
  return d == 64 ? forward_d<64>(o, lse, q, k, v, bh, n, scale, s) : forward_d<128>(o, lse, q, k, v, bh, n, scale, s);
}

status attention_mma_backward(bf16* dq, bf16* dk, bf16* dv, const float* delta, const bf16* dout, const bf16* q,
                              const bf16* k, const bf16* v, const float* lse, int bh, int n, int d, float scale,
                              cudaStream_t s) {
  return d == 64 ? backward_d<64>(dq, dk, dv, delta, dout, q, k, v, lse, bh, n, scale, s)
                 : backward_d<128>(dq, dk, dv, delta, dout, q, k, v, lse, bh, n, scale, s);
}

} // namespace troupe::gpu::detail
