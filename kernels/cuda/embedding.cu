// Embedding kernels: one block per token row; the backward adds with atomics.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.hpp"

#include <string>

namespace troupe::gpu {

namespace {

using namespace detail;

template <typename T>
__global__ void emb_forward(T* out, const std::int32_t* ids, const T* wte, const T* wpe, int seq_len, int vocab,
                            int dim) {
  int row = blockIdx.x;
  int id = ids[row];
  bool ok = id >= 0 && id < vocab;
  const T* te = wte + (long long)(ok ? id : 0) * dim;
  const T* pe = wpe ? wpe + (long long)(row % seq_len) * dim : nullptr;
  T* o = out + (long long)row * dim;
  for (int c = threadIdx.x; c < dim; c += blockDim.x)
    o[c] = from_f32<T>(ok ? to_f32(te[c]) + (pe ? to_f32(pe[c]) : 0.0f) : NAN);
}

template <typename T>
__global__ void emb_backward(float* dwte, float* dwpe, const T* dout, const std::int32_t* ids, int seq_len, int vocab,
                             int dim) {
  int row = blockIdx.x;
  int id = ids[row];
  const T* g = dout + (long long)row * dim;
  float* pe = dwpe ? dwpe + (long long)(row % seq_len) * dim : nullptr;
  bool ok = id >= 0 && id < vocab;
  float* te = dwte + (long long)(ok ? id : 0) * dim;
  for (int c = threadIdx.x; c < dim; c += blockDim.x) {
    float v = to_f32(g[c]);
    if (ok)
      atomicAdd(te + c, v);
    if (pe)
      atomicAdd(pe + c, v);
  }
}

status check(const char* what, int rows, int seq_len, int vocab, int dim) {
  if (rows < 0 || seq_len <= 0 || vocab <= 0 || dim <= 0)
    return status::failure(std::string{what} + ": bad sizes rows=" + std::to_string(rows) + " seq_len=" +
                           std::to_string(seq_len) + " vocab=" + std::to_string(vocab) + " dim=" + std::to_string(dim));
  return {};
}

int threads_for(int dim) {
  return dim >= 256 ? 256 : (dim + 31) / 32 * 32;
}

template <typename T>
status forward(T* out, const std::int32_t* ids, const T* wte, const T* wpe, int rows, int seq_len, int vocab, int dim,
               cudaStream_t s) {
  TROUPE_GPU_TRY(check("embedding_forward", rows, seq_len, vocab, dim));
  if (rows == 0)
    return {};
  emb_forward<<<rows, threads_for(dim), 0, s>>>(out, ids, wte, wpe, seq_len, vocab, dim);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

template <typename T>
status backward(float* dwte, float* dwpe, const T* dout, const std::int32_t* ids, int rows, int seq_len, int vocab,
                int dim, cudaStream_t s) {
  TROUPE_GPU_TRY(check("embedding_backward", rows, seq_len, vocab, dim));
  if (rows == 0)
    return {};
  emb_backward<<<rows, threads_for(dim), 0, s>>>(dwte, dwpe, dout, ids, seq_len, vocab, dim);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

} // namespace

using bf16 = __nv_bfloat16;

status embedding_forward(float* out, const std::int32_t* ids, const float* wte, const float* wpe, int rows, int seq_len,
                         int vocab, int dim, cudaStream_t s) {
  return forward(out, ids, wte, wpe, rows, seq_len, vocab, dim, s);
}
status embedding_forward(bf16* out, const std::int32_t* ids, const bf16* wte, const bf16* wpe, int rows, int seq_len,
                         int vocab, int dim, cudaStream_t s) {
  return forward(out, ids, wte, wpe, rows, seq_len, vocab, dim, s);
}
status embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* ids, int rows, int seq_len,
                          int vocab, int dim, cudaStream_t s) {
  return backward(dwte, dwpe, dout, ids, rows, seq_len, vocab, dim, s);
}
status embedding_backward(float* dwte, float* dwpe, const bf16* dout, const std::int32_t* ids, int rows, int seq_len,
                          int vocab, int dim, cudaStream_t s) {
  return backward(dwte, dwpe, dout, ids, rows, seq_len, vocab, dim, s);
}

} // namespace troupe::gpu
