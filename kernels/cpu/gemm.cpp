// sgemm through OpenBLAS (Debian's pthread build), forced to one thread by default.
#include "kernels/cpu/gemm.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include <cblas.h>

namespace troupe::kernels::cpu {

namespace {

std::atomic<int> configured_threads{0};

/// Applies the default thread count once: TROUPE_BLAS_THREADS or 1.
void ensure_configured() {
  if (configured_threads.load(std::memory_order_relaxed) != 0)
    return;
  static std::once_flag once;
  std::call_once(once, [] {
    int n = 1;
    if (const char* env = std::getenv("TROUPE_BLAS_THREADS"); env && std::atoi(env) > 0)
      n = std::atoi(env);
    openblas_set_num_threads(n);
    configured_threads.store(n);
  });
}

} // namespace

void set_blas_threads(int n) {
  ensure_configured();
  n = n < 1 ? 1 : n;
  openblas_set_num_threads(n);
  configured_threads.store(n);
}

int blas_threads() {
  ensure_configured();
  return configured_threads.load();
}

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc) {
  ensure_configured();
  if (m == 0 || n == 0)
    return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

void sgemm_reference(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                     const float* b, int ldb, float beta, float* c, int ldc) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int p = 0; p < k; ++p) {
        double x = trans_a ? a[p * lda + i] : a[i * lda + p];
        double y = trans_b ? b[j * ldb + p] : b[p * ldb + j];
        acc += x * y;
      }
      float prev = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
      c[i * ldc + j] = static_cast<float>(alpha * acc) + prev;
    }
}

} // namespace troupe::kernels::cpu
