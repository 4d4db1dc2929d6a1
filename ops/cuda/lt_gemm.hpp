// Row-major bf16 matrix products through cuBLASLt with fused epilogues (bias,
// bias + GELU keeping the GELU input, GELU gradient) and a separate residual
// input C, so the GPU GPT's projections need no extra passes over memory.
#pragma once

#include <cstddef>

#include <cublasLt.h>
#include <cuda_bf16.h>

#include "kernels/cuda/check.hpp"

namespace troupe::ops::cuda {

/// What the epilogue does to the product P = op(A)·op(B) (row-major [m, n]).
enum class lt_epilogue {
  none,      ///< D = P + beta·C
  bias,      ///< D = P + bias + beta·C (bias [n])
  gelu_bias, ///< aux = P + bias; D = gelu_tanh(aux) (beta must be 0)
  dgelu,     ///< D = P · gelu_tanh'(aux) (aux [m, n] from a gelu_bias forward; beta must be 0)
};

/// One product D[m, n] = epilogue(op(A)·op(B)) (+ beta·C); shapes as gpu::gemm_shape:
/// A stored [m, k] (or [k, m] with trans_a), B stored [k, n] (or [n, k] with trans_b).
struct lt_call {
  int m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float beta = 0.0f;
  lt_epilogue epilogue = lt_epilogue::none;
  const __nv_bfloat16* a = nullptr;
  const __nv_bfloat16* b = nullptr;
  const __nv_bfloat16* c = nullptr; ///< read when beta != 0; may differ from d
  __nv_bfloat16* d = nullptr;
  const __nv_bfloat16* bias = nullptr;
  __nv_bfloat16* aux = nullptr; ///< written by gelu_bias, read by dgelu
};

/// Owns a cuBLASLt handle and its workspace (device memory the caller provides).
class lt_gemm {
public:
  lt_gemm() = default;
  lt_gemm(const lt_gemm&) = delete;
  lt_gemm& operator=(const lt_gemm&) = delete;
  ~lt_gemm();

  /// Creates the handle; `workspace` (16-byte aligned, `bytes` long) must outlive it.
  gpu::status init(void* workspace, std::size_t bytes);
  gpu::status run(const lt_call& call, cudaStream_t stream) const;

private:
  cublasLtHandle_t h_ = nullptr;
  void* ws_ = nullptr;
  std::size_t ws_bytes_ = 0;
};

} // namespace troupe::ops::cuda
