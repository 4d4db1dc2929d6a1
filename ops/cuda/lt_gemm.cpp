// cuBLASLt products for the GPU GPT: a row-major product is the column-major
// product of the transposes, so A and B swap and the bias runs along D's rows.
#include "ops/cuda/lt_gemm.hpp"

#include <string>

namespace troupe::ops::cuda {

namespace {

/// Frees the cuBLASLt descriptors of one call whatever path it returns by.
struct descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~descriptors() {
    if (pref)
      cublasLtMatmulPreferenceDestroy(pref);
    for (auto* l : {a, b, c, d})
      if (l)
        cublasLtMatrixLayoutDestroy(l);
    if (op)
      cublasLtMatmulDescDestroy(op);
  }
};

} // namespace

lt_gemm::~lt_gemm() {
  if (h_)
    cublasLtDestroy(h_);
}

gpu::status lt_gemm::init(void* workspace, std::size_t bytes) {
  TROUPE_CUBLAS_CHECK(cublasLtCreate(&h_));
  ws_ = workspace;
  ws_bytes_ = bytes;
  return {};
}

gpu::status lt_gemm::run(const lt_call& x, cudaStream_t stream) const {
  if (!h_)
    return gpu::status::failure("ops/cuda/lt_gemm: init() has not run");
  if ((x.epilogue == lt_epilogue::gelu_bias || x.epilogue == lt_epilogue::dgelu) && (!x.aux || x.beta != 0.0f))
    return gpu::status::failure("ops/cuda/lt_gemm: GELU epilogues need aux and beta 0");
  if ((x.epilogue == lt_epilogue::bias || x.epilogue == lt_epilogue::gelu_bias) && !x.bias)
    return gpu::status::failure("ops/cuda/lt_gemm: a bias epilogue needs a bias");
  // Column-major view: D'[n, m] = op(B)'[n, k] · op(A)'[k, m].
  descriptors ds;
  TROUPE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&ds.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opa = x.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opb = x.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  TROUPE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  TROUPE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  switch (x.epilogue) {
  case lt_epilogue::none:
    break;
  case lt_epilogue::bias:
    epi = CUBLASLT_EPILOGUE_BIAS;
    break;
  case lt_epilogue::gelu_bias:
    epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    break;
  case lt_epilogue::dgelu:
    epi = CUBLASLT_EPILOGUE_DGELU;
    break;
  }
  TROUPE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (x.bias)
    TROUPE_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x.bias, sizeof x.bias));
  if (x.aux && x.epilogue != lt_epilogue::none && x.epilogue != lt_epilogue::bias) {
    std::int64_t ld = x.n;
    TROUPE_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &x.aux, sizeof x.aux));
    TROUPE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
  }
  const auto bf = CUDA_R_16BF;
  // A' is our B: stored [k, n] row-major (= [n, k] column-major), or [n, k] with trans_b.
  const std::uint64_t a_rows = x.trans_b ? x.k : x.n, a_cols = x.trans_b ? x.n : x.k;
  const std::uint64_t b_rows = x.trans_a ? x.m : x.k, b_cols = x.trans_a ? x.k : x.m;
  TROUPE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds.a, bf, a_rows, a_cols, std::int64_t(a_rows)));
  TROUPE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds.b, bf, b_rows, b_cols, std::int64_t(b_rows)));
  TROUPE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds.c, bf, std::uint64_t(x.n), std::uint64_t(x.m), x.n));
  TROUPE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds.d, bf, std::uint64_t(x.n), std::uint64_t(x.m), x.n));
  TROUPE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&ds.pref));
  TROUPE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &ws_bytes_, sizeof ws_bytes_));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  TROUPE_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h_, ds.op, ds.a, ds.b, ds.c, ds.d, ds.pref, 1, &heur, &found));
  if (found == 0)
    return gpu::status::failure("ops/cuda/lt_gemm: cuBLASLt has no algorithm for " + std::to_string(x.m) + "x" +
                                std::to_string(x.n) + "x" + std::to_string(x.k) + " with this epilogue");
  const float alpha = 1.0f;
  const void* c = x.beta != 0.0f && x.c ? static_cast<const void*>(x.c) : static_cast<const void*>(x.d);
  TROUPE_CUBLAS_CHECK(cublasLtMatmul(h_, ds.op, &alpha, x.b, ds.a, x.a, ds.b, &x.beta, c, ds.c, x.d, ds.d, &heur.algo,
                                     ws_, ws_bytes_, stream));
  return {};
}

} // namespace troupe::ops::cuda
