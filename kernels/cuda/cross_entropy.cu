// Cross-entropy kernels: count the counted rows, then one block per row finds
// the log-sum-exp with an online max and writes loss and gradient, then one
// block sums the row losses in a fixed order (deterministic).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cross_entropy.hpp"

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

template <typename T>
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
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    float v = to_f32(x[j]);
    if (v > m) {
      s = s * __expf(m - v) + 1.0f;
      m = v;
    } else {
      s += __expf(v - m);
    }
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
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    float p = __expf(to_f32(x[j]) - lse);
    dx[j] = from_f32<T>(g * (p - (j == t ? 1.0f : 0.0f)));
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
status run(const cross_entropy_out& out, T* dlogits, const T* logits, const std::int32_t* targets, int rows,
           int vocab, int ignore_index, float scale, cudaStream_t s) {
  if (rows < 0 || vocab <= 0)
    return status::failure("cross_entropy_forward_backward: bad sizes rows=" + std::to_string(rows) +
                           " vocab=" + std::to_string(vocab));
  if (!out.loss || !out.row_loss || !out.count)
    return status::failure("cross_entropy_forward_backward: loss, row_loss and count buffers are all required");
  count_kernel<<<1, 1024, 0, s>>>(out.count, targets, rows, ignore_index);
  TROUPE_CUDA_CHECK_LAUNCH();
  if (rows > 0) {
    row_kernel<<<rows, threads, 0, s>>>(out.row_loss, dlogits, logits, targets, out.count, vocab, ignore_index,
                                        scale);
    TROUPE_CUDA_CHECK_LAUNCH();
  }
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

status cross_entropy_forward_backward(const cross_entropy_out& out, __nv_bfloat16* dlogits,
                                      const __nv_bfloat16* logits, const std::int32_t* targets, int rows,
                                      int vocab, int ignore_index, float dloss_scale, cudaStream_t s) {
  return run(out, dlogits, logits, targets, rows, vocab, ignore_index, dloss_scale, s);
}

} // namespace troupe::gpu
