// Cross-entropy kernels: count the counted rows, then one block per row finds
// the log-sum-exp with an online max and writes loss and gradient, then one
// block sums the row losses in a fixed order (deterministic).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cross_entropy.hpp"

#include <cstdint>
#include <string>

namespace troupe::gpu {

namespace {

using namespace detail;

constexpr int threads = 512;

__global__ void count_kernel(std::int32_t* count, const std::int32_t* targets, int rows, int ignore_index) {
  __shared__ float scratch[32];
  float c = 0.0f;
  for (int i = threadIdx.x; i < rows; i += blockDim.x)
    c += targets[i] != ignore_index ? 1.0f : 0.0f;
  c = block_sum(c, scratch);
  if (threadIdx.x == 0)
    *count = static_cast<std::int32_t>(c + 0.5f);
}

/// One block per row; V elements per access (16 bytes when the row allows it).
template <typename T, int V>
__global__ void row_kernel(float* row_loss, T* dlogits, const T* logits, const std::int32_t* targets,
                           const std::int32_t* count, int vocab, int ignore_index, float scale) {
  __shared__ float scratch[32];
  int row = blockIdx.x;
  const T* x = logits + (long long)row * vocab;
  int t = targets[row];
  bool counted = t != ignore_index;
  bool valid = t >= 0 && t < vocab;
  float xt = counted && valid ? to_f32(x[t]) : 0.0f; // read before any in-place write below
  float m = -INFINITY, s = 0.0f;
  for (int j = threadIdx.x * V; j < vocab; j += blockDim.x * V) {
    float v[V];
    load_vec<T, V>(x + j, v);
    float cm = v[0];
#pragma unroll
    for (int i = 1; i < V; ++i)
      cm = fmaxf(cm, v[i]);
    if (cm > m) {
      s *= __expf(m - cm);
      m = cm;
    }
    // A -inf logit (padding, a masked class) adds exactly 0; testing for it keeps
    // exp(-inf - -inf) = NaN out of a chunk that is all -inf, while a NaN logit
    // still reaches exp and poisons the loss as it must.
#pragma unroll
    for (int i = 0; i < V; ++i)
      s += v[i] == -INFINITY ? 0.0f : __expf(v[i] - m);
  }
  float bm = block_max(m, scratch);
  float bs = block_sum(m == -INFINITY ? 0.0f : s * __expf(m - bm), scratch);
  float lse = bm + logf(bs);
  if (threadIdx.x == 0)
    row_loss[row] = !counted ? 0.0f : valid ? lse - xt : NAN;
  if (dlogits == nullptr)
    return;
  int n = *count;
  float g = counted && n > 0 ? scale / n : 0.0f;
  T* dx = dlogits + (long long)row * vocab;
  for (int j = threadIdx.x * V; j < vocab; j += blockDim.x * V) {
    float v[V];
    load_vec<T, V>(x + j, v);
#pragma unroll
    for (int i = 0; i < V; ++i)
      v[i] = g * (__expf(v[i] - lse) - (j + i == t ? 1.0f : 0.0f));
    store_vec<T, V>(dx + j, v);
  }
}

__global__ void mean_kernel(float* loss, const float* row_loss, const std::int32_t* count, int rows) {
  __shared__ float scratch[32];
  float s = 0.0f;
  for (int i = threadIdx.x; i < rows; i += blockDim.x)
    s += row_loss[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0)
    *loss = *count > 0 ? s / *count : 0.0f;
}

template <typename T>
status run(const cross_entropy_out& out, T* dlogits, const T* logits, const std::int32_t* targets, int rows, int vocab,
           int ignore_index, float scale, cudaStream_t s) {
  if (rows < 0 || vocab <= 0)
    return status::failure("cross_entropy_forward_backward: bad sizes rows=" + std::to_string(rows) +
                           " vocab=" + std::to_string(vocab));
  if (!out.loss || !out.row_loss || !out.count)
    return status::failure("cross_entropy_forward_backward: loss, row_loss and count buffers are all required");
  count_kernel<<<1, 1024, 0, s>>>(out.count, targets, rows, ignore_index);
  TROUPE_CUDA_CHECK_LAUNCH();
  constexpr int vec = 16 / sizeof(T);
  bool wide = vocab % vec == 0 && reinterpret_cast<std::uintptr_t>(logits) % 16 == 0 &&
              reinterpret_cast<std::uintptr_t>(dlogits) % 16 == 0;
  if (rows > 0 && wide)
    row_kernel<T, vec>
      <<<rows, threads, 0, s>>>(out.row_loss, dlogits, logits, targets, out.count, vocab, ignore_index, scale);
  else if (rows > 0)
    row_kernel<T, 1>
      <<<rows, threads, 0, s>>>(out.row_loss, dlogits, logits, targets, out.count, vocab, ignore_index, scale);
  TROUPE_CUDA_CHECK_LAUNCH();
  mean_kernel<<<1, 1024, 0, s>>>(out.loss, out.row_loss, out.count, rows);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

} // namespace

status cross_entropy_forward_backward(const cross_entropy_out& out, float* dlogits, const float* logits,
                                      const std::int32_t* targets, int rows, int vocab, int ignore_index,
                                      float dloss_scale, cudaStream_t s) {
  return run(out, dlogits, logits, targets, rows, vocab, ignore_index, dloss_scale, s);
}

status cross_entropy_forward_backward(const cross_entropy_out& out, __nv_bfloat16* dlogits, const __nv_bfloat16* logits,
                                      const std::int32_t* targets, int rows, int vocab, int ignore_index,
                                      float dloss_scale, cudaStream_t s) {
  return run(out, dlogits, logits, targets, rows, vocab, ignore_index, dloss_scale, s);
}

} // namespace troupe::gpu
