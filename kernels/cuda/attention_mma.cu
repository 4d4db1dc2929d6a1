// Tensor-core flash attention (FlashAttention-2 layout of work): each warp owns
// 16 rows, a block 64; the other side streams through shared memory in tiles
// of 64. Fragment layouts are those of PTX mma.m16n8k16 (row.col): lane = 4g + t.
// Backward: dK/dV per key block, and dQ either fused into that pass (atomic f32
// adds, head_dim 64) or from its own pass over query blocks (head_dim 128).
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/common.cuh"

#include <cstdint>

namespace troupe::gpu::detail {

namespace {

using bf16 = __nv_bfloat16;
using u32 = std::uint32_t;

constexpr int tile = 64;                // streamed rows per step
constexpr int nwarps = 4;               // 16 resident rows each (8 measured slower on H100)
constexpr int block_rows = 16 * nwarps; // resident rows per block
constexpr int pad = 8;                  // bf16 of padding per shared row: conflict-free fragment loads
constexpr float log2e = 1.4426950408889634f;

__device__ __forceinline__ void mma(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 ld32(const bf16* p) {
  return *reinterpret_cast<const u32*>(p);
}

/// Four 8x8 b16 matrices from shared memory; lane L gives row L % 8 of matrix L / 8.
__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], const bf16* p) {
  auto a = static_cast<u32>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

/// As ldsm_x4, each matrix transposed.
__device__ __forceinline__ void ldsm_x4_t(u32 (&r)[4], const bf16* p) {
  auto a = static_cast<u32>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ u32 pack(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<u32*>(&h);
}

/// Starts asynchronous copies (cp.async) of rows [r0, r0+ROWS) of a [n, D]
/// matrix into shared [ROWS][D+pad]; rows past n are filled with zeros.
template <int D, int ROWS = tile>
__device__ __forceinline__ void load_rows(bf16* dst, const bf16* src, int r0, int n) {
  constexpr int chunks = D / 8;
  for (int i = threadIdx.x; i < ROWS * chunks; i += blockDim.x) {
    int r = i / chunks, c = (i % chunks) * 8;
    bool in = r0 + r < n;
    const bf16* from = src + (long long)(in ? r0 + r : 0) * D + c;
    auto to = static_cast<u32>(__cvta_generic_to_shared(dst + r * (D + pad) + c));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from), "r"(in ? 16 : 0));
  }
}

__device__ __forceinline__ void commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

/// Waits until at most N committed copy groups are still in flight.
template <int N>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
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
__device__ __forceinline__ void scores(float (&acc)[8][4], const u32 (&a)[D / 16][4], const bf16* b, int lane) {
  const int r = lane % 8, mi = lane / 8;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk += 2) {
      u32 f[4];
      ldsm_x4(f, b + (j * 8 + r) * (D + pad) + kk * 16 + mi * 8);
      mma(acc[j], a[kk], f[0], f[1]);
      mma(acc[j], a[kk + 1], f[2], f[3]);
    }
  }
}

/// acc (16 x D) += P (16 x 64, as score fragments) times B, B a shared [64][D+pad] tile
/// (read transposed by ldmatrix).
template <int D>
__device__ __forceinline__ void accumulate_pv(float (&acc)[D / 8][4], const float (&p)[8][4], const bf16* b, int lane) {
  const int r = lane % 8, mi = lane / 8;
#pragma unroll
  for (int kk = 0; kk < tile / 16; ++kk) {
    u32 a[4] = {pack(p[2 * kk][0], p[2 * kk][1]), pack(p[2 * kk][2], p[2 * kk][3]),
                pack(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dn = 0; dn < D / 8; dn += 2) {
      u32 f[4];
      ldsm_x4_t(f, b + (kk * 16 + (mi & 1) * 8 + r) * (D + pad) + (dn + (mi >> 1)) * 8);
      mma(acc[dn], a, f[0], f[1]);
      mma(acc[dn + 1], a, f[2], f[3]);
    }
  }
}

/// Elements of one shared streamed tile [tile][D+pad] and of the resident rows [block_rows][D+pad].
template <int D>
constexpr int tile_elems = tile*(D + pad);
template <int D>
constexpr int block_elems = block_rows*(D + pad);

// Each kernel double-buffers the streamed tiles: the copy of tile i+1 runs
// while tile i is multiplied.

template <int D>
__global__ void __launch_bounds__(nwarps * 32)
  fwd_kernel(bf16* o, float* lse, const bf16* q, const bf16* k, const bf16* v, int n, float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + block_elems<D>;    // [2] tiles
  bf16* vs = ks + 2 * tile_elems<D>; // [2] tiles
  const long long base = (long long)blockIdx.y * n * D;
  // Blocks with the longest causal rows start first, so the short ones fill the tail.
  const int q0 = (gridDim.x - 1 - blockIdx.x) * block_rows, warp = threadIdx.x / 32, lane = threadIdx.x % 32,
            g = lane / 4, t = lane % 4;
  const float c = scale * log2e;
  const int tiles = (min(q0 + block_rows, n) - 1) / tile + 1;
  load_rows<D, block_rows>(qs, q + base, q0, n);
  commit();
  load_rows<D>(ks, k + base, 0, n);
  load_rows<D>(vs, v + base, 0, n);
  commit();
  wait_copies<1>();
  __syncthreads();
  u32 qf[D / 16][4];
  load_a<D>(qf, qs, warp * 16, g, t);
  float acc[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  for (int it = 0; it < tiles; ++it) {
    const int k0 = it * tile, cur = (it & 1) * tile_elems<D>, nxt = ((it + 1) & 1) * tile_elems<D>;
    if (it + 1 < tiles) {
      load_rows<D>(ks + nxt, k + base, k0 + tile, n);
      load_rows<D>(vs + nxt, v + base, k0 + tile, n);
      commit();
      wait_copies<1>();
    } else {
      wait_copies<0>();
    }
    __syncthreads();
    float s[8][4];
    scores<D>(s, qf, ks + cur, lane);
    // Warp-uniform: every key of the tile is visible to every row of the warp.
    const bool inside = k0 + tile - 1 <= q0 + warp * 16 && q0 + warp * 16 + 15 < n;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
      if (inside) {
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            s[j][2 * h + e] *= c;
            mx = fmaxf(mx, s[j][2 * h + e]);
          }
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            int col = k0 + j * 8 + 2 * t + e;
            float x = col <= rows[h] && col < n ? s[j][2 * h + e] * c : -INFINITY;
            s[j][2 * h + e] = x;
            mx = fmaxf(mx, x);
          }
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
    accumulate_pv<D>(acc, s, vs + cur, lane);
    __syncthreads(); // the next copy overwrites this tile
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
__global__ void __launch_bounds__(nwarps * 32)
  dq_kernel(bf16* dq, const bf16* dout, const bf16* q, const bf16* k, const bf16* v, const float* lse,
            const float* delta, int n, float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* dos = qs + block_elems<D>;
  bf16* ks = dos + block_elems<D>;   // [2] tiles
  bf16* vs = ks + 2 * tile_elems<D>; // [2] tiles
  const long long base = (long long)blockIdx.y * n * D, row_base = (long long)blockIdx.y * n;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * block_rows, warp = threadIdx.x / 32, lane = threadIdx.x % 32,
            g = lane / 4, t = lane % 4;
  const float c = scale * log2e;
  const int tiles = (min(q0 + block_rows, n) - 1) / tile + 1;
  load_rows<D, block_rows>(qs, q + base, q0, n);
  load_rows<D, block_rows>(dos, dout + base, q0, n);
  commit();
  load_rows<D>(ks, k + base, 0, n);
  load_rows<D>(vs, v + base, 0, n);
  commit();
  wait_copies<1>();
  __syncthreads();
  u32 qf[D / 16][4], df[D / 16][4];
  load_a<D>(qf, qs, warp * 16, g, t);
  load_a<D>(df, dos, warp * 16, g, t);
  const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float lse2[2], dl[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int r = min(rows[h], n - 1);
    lse2[h] = lse[row_base + r] * log2e;
    dl[h] = delta[row_base + r];
  }
  float acc[D / 8][4] = {};
  for (int it = 0; it < tiles; ++it) {
    const int k0 = it * tile, cur = (it & 1) * tile_elems<D>, nxt = ((it + 1) & 1) * tile_elems<D>;
    if (it + 1 < tiles) {
      load_rows<D>(ks + nxt, k + base, k0 + tile, n);
      load_rows<D>(vs + nxt, v + base, k0 + tile, n);
      commit();
      wait_copies<1>();
    } else {
      wait_copies<0>();
    }
    __syncthreads();
    float s[8][4], dp[8][4];
    scores<D>(s, qf, ks + cur, lane);
    scores<D>(dp, df, vs + cur, lane);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int h = e / 2, col = k0 + j * 8 + 2 * t + (e & 1);
        float p = col <= rows[h] && col < n && rows[h] < n ? exp2f(s[j][e] * c - lse2[h]) : 0.0f;
        s[j][e] = p * (dp[j][e] - dl[h]);
      }
    accumulate_pv<D>(acc, s, ks + cur, lane);
    __syncthreads();
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

/// dK and dV for a block of keys, kept in registers over the query tiles.
/// With fuse_dq it also adds each tile's dQ share to the f32 dq_acc by atomic
/// adds, so dq_kernel need not recompute the scores (faster at head_dim 64;
/// at 128 the extra registers spill and the separate kernel wins).
template <int D, bool fuse_dq>
__global__ void __launch_bounds__(nwarps * 32)
  dkv_kernel(bf16* dk, bf16* dv, float* dq_acc, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
             const float* lse, const float* delta, int n, float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* kss = reinterpret_cast<bf16*>(smem);
  bf16* vss = kss + block_elems<D>;
  bf16* qs = vss + block_elems<D>;                                  // [2] tiles
  bf16* ds = qs + 2 * tile_elems<D>;                                // [2] tiles of dO
  float* lse2_s = reinterpret_cast<float*>(ds + 2 * tile_elems<D>); // [2][tile]
  float* dl_s = lse2_s + 2 * tile;                                  // [2][tile]
  bf16* dst_s = reinterpret_cast<bf16*>(dl_s + 2 * tile);           // dS^T [block_rows][tile+pad]
  const long long base = (long long)blockIdx.y * n * D, row_base = (long long)blockIdx.y * n;
  const int k0 = blockIdx.x * block_rows, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float c = scale * log2e;
  const int tiles = (n - k0 + tile - 1) / tile; // query tiles from the diagonal on
  auto stage_rows = [&](int i0, int buf) {
    for (int i = threadIdx.x; i < tile; i += blockDim.x) {
      bool in = i0 + i < n;
      lse2_s[buf * tile + i] = in ? lse[row_base + i0 + i] * log2e : 0.0f;
      dl_s[buf * tile + i] = in ? delta[row_base + i0 + i] : 0.0f;
    }
  };
  load_rows<D, block_rows>(kss, k + base, k0, n);
  load_rows<D, block_rows>(vss, v + base, k0, n);
  commit();
  load_rows<D>(qs, q + base, k0, n);
  load_rows<D>(ds, dout + base, k0, n);
  commit();
  stage_rows(k0, 0);
  wait_copies<1>();
  __syncthreads();
  u32 kf[D / 16][4], vf[D / 16][4];
  load_a<D>(kf, kss, warp * 16, g, t);
  load_a<D>(vf, vss, warp * 16, g, t);
  const int keys[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  float dka[D / 8][4] = {}, dva[D / 8][4] = {};
  for (int it = 0; it < tiles; ++it) {
    const int i0 = k0 + it * tile, b = it & 1, cur = b * tile_elems<D>, nxt = (b ^ 1) * tile_elems<D>;
    if (it + 1 < tiles) {
      load_rows<D>(qs + nxt, q + base, i0 + tile, n);
      load_rows<D>(ds + nxt, dout + base, i0 + tile, n);
      commit();
      stage_rows(i0 + tile, b ^ 1);
      wait_copies<1>();
    } else {
      wait_copies<0>();
    }
    __syncthreads();
    float s[8][4], dp[8][4];
    scores<D>(s, kf, qs + cur, lane);  // S^T: keys x queries
    scores<D>(dp, vf, ds + cur, lane); // dP^T
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int h = e / 2, ci = j * 8 + 2 * t + (e & 1), col = i0 + ci;
        float p = keys[h] <= col && col < n && keys[h] < n ? exp2f(s[j][e] * c - lse2_s[b * tile + ci]) : 0.0f;
        s[j][e] = p;
        dp[j][e] = p * (dp[j][e] - dl_s[b * tile + ci]);
      }
    accumulate_pv<D>(dva, s, ds + cur, lane);
    accumulate_pv<D>(dka, dp, qs + cur, lane);
    if constexpr (fuse_dq) {
      // dQ[tile] += dS K: dS^T goes through shared memory, each warp then takes 16 queries.
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<u32*>(dst_s + (warp * 16 + g + 8 * h) * (tile + pad) + j * 8 + 2 * t) =
            pack(dp[j][2 * h], dp[j][2 * h + 1]);
      __syncthreads();
      float qa[D / 8][4] = {};
      const int r = lane % 8, mi = lane / 8;
#pragma unroll
      for (int kk = 0; kk < block_rows / 16; ++kk) {
        u32 a[4];
        ldsm_x4_t(a, dst_s + (kk * 16 + (mi >> 1) * 8 + r) * (tile + pad) + warp * 16 + (mi & 1) * 8);
#pragma unroll
        for (int dn = 0; dn < D / 8; dn += 2) {
          u32 f[4];
          ldsm_x4_t(f, kss + (kk * 16 + (mi & 1) * 8 + r) * (D + pad) + (dn + (mi >> 1)) * 8);
          mma(qa[dn], a, f[0], f[1]);
          mma(qa[dn + 1], a, f[2], f[3]);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int row = i0 + warp * 16 + g + 8 * h;
        if (row >= n)
          continue;
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn)
          atomicAdd(reinterpret_cast<float2*>(dq_acc + base + (long long)row * D + dn * 8 + 2 * t),
                    make_float2(qa[dn][2 * h], qa[dn][2 * h + 1]));
      }
    }
    __syncthreads();
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
constexpr std::size_t fwd_smem = (block_elems<D> + 4 * tile_elems<D>)*sizeof(bf16);
template <int D>
constexpr std::size_t dq_smem = (2 * block_elems<D> + 4 * tile_elems<D>)*sizeof(bf16);
template <int D, bool fuse_dq>
constexpr std::size_t dkv_smem = (2 * block_elems<D> + 4 * tile_elems<D> + (fuse_dq ? block_rows * (tile + pad) : 0)) *
                                   sizeof(bf16) +
                                 4 * tile * sizeof(float);

/// dq = bf16(dq_acc * scale), 8 elements per thread.
__global__ void dq_convert(bf16* dq, const float* dq_acc, long long chunks, float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < chunks;
       i += (long long)gridDim.x * blockDim.x) {
    float v[8];
    const float4* src = reinterpret_cast<const float4*>(dq_acc) + 2 * i;
    float4 a = src[0], b = src[1];
    v[0] = a.x * scale, v[1] = a.y * scale, v[2] = a.z * scale, v[3] = a.w * scale;
    v[4] = b.x * scale, v[5] = b.y * scale, v[6] = b.z * scale, v[7] = b.w * scale;
    store_vec<bf16, 8>(dq + 8 * i, v);
  }
}

template <typename K>
status allow_smem(K kernel, std::size_t bytes) {
  TROUPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  return {};
}

template <int D>
status forward_d(bf16* o, float* lse, const bf16* q, const bf16* k, const bf16* v, int bh, int n, float scale,
                 cudaStream_t s) {
  TROUPE_GPU_TRY(allow_smem(fwd_kernel<D>, fwd_smem<D>));
  fwd_kernel<D>
    <<<dim3((n + block_rows - 1) / block_rows, bh), nwarps * 32, fwd_smem<D>, s>>>(o, lse, q, k, v, n, scale);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

template <int D>
status backward_d(bf16* dq, bf16* dk, bf16* dv, float* dq_acc, const float* delta, const bf16* dout, const bf16* q,
                  const bf16* k, const bf16* v, const float* lse, int bh, int n, float scale, cudaStream_t s) {
  dim3 grid((n + block_rows - 1) / block_rows, bh);
  if constexpr (D == 64) {
    long long total = (long long)bh * n * D;
    TROUPE_CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, total * sizeof(float), s));
    TROUPE_GPU_TRY(allow_smem(dkv_kernel<D, true>, dkv_smem<D, true>));
    dkv_kernel<D, true>
      <<<grid, nwarps * 32, dkv_smem<D, true>, s>>>(dk, dv, dq_acc, dout, q, k, v, lse, delta, n, scale);
    TROUPE_CUDA_CHECK_LAUNCH();
    dq_convert<<<grid_for(total / 8, 256), 256, 0, s>>>(dq, dq_acc, total / 8, scale);
    TROUPE_CUDA_CHECK_LAUNCH();
  } else {
    TROUPE_GPU_TRY(allow_smem(dq_kernel<D>, dq_smem<D>));
    dq_kernel<D><<<grid, nwarps * 32, dq_smem<D>, s>>>(dq, dout, q, k, v, lse, delta, n, scale);
    TROUPE_CUDA_CHECK_LAUNCH();
    TROUPE_GPU_TRY(allow_smem(dkv_kernel<D, false>, dkv_smem<D, false>));
    dkv_kernel<D, false>
      <<<grid, nwarps * 32, dkv_smem<D, false>, s>>>(dk, dv, nullptr, dout, q, k, v, lse, delta, n, scale);
    TROUPE_CUDA_CHECK_LAUNCH();
  }
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

status attention_mma_backward(bf16* dq, bf16* dk, bf16* dv, float* dq_acc, const float* delta, const bf16* dout,
                              const bf16* q, const bf16* k, const bf16* v, const float* lse, int bh, int n, int d,
                              float scale, cudaStream_t s) {
  return d == 64 ? backward_d<64>(dq, dk, dv, dq_acc, delta, dout, q, k, v, lse, bh, n, scale, s)
                 : backward_d<128>(dq, dk, dv, dq_acc, delta, dout, q, k, v, lse, bh, n, scale, s);
}

} // namespace troupe::gpu::detail
