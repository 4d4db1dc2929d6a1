// Error values for CUDA, cuBLAS and NCCL calls: a check macro records where a
// call failed and returns the error upward; only `main` and tests abort.
#pragma once

#include <string>
#include <utility>

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#if __has_include(<nccl.h>)
#include <nccl.h>
#define TROUPE_HAVE_NCCL_HEADER 1
#endif

namespace troupe::gpu {

/// The outcome of a GPU call: ok, or a message saying where and what failed.
class [[nodiscard]] status {
public:
  status() = default;

  /// A failure with `message`, which should name the place and the call.
  static status failure(std::string message) {
    status s;
    s.message_ = message.empty() ? std::string{"unknown GPU error"} : std::move(message);
    return s;
  }

  bool ok() const noexcept { return message_.empty(); }
  /// Empty when ok; else `file:line: call: error name (description)`.
  const std::string& message() const noexcept { return message_; }

private:
  std::string message_;
};

/// `cuda_available()` is true when at least one CUDA device can be used.
/// Any error from cudaGetDeviceCount (no driver, no device) means "no GPU".
bool cuda_available() noexcept;

/// A failure status for a CUDA runtime error at `file:line` in `call`.
status cuda_failure(cudaError_t e, const char* call, const char* file, int line);
/// A failure status for a cuBLAS error at `file:line` in `call`.
status cublas_failure(cublasStatus_t e, const char* call, const char* file, int line);
#ifdef TROUPE_HAVE_NCCL_HEADER
/// A failure status for an NCCL error at `file:line` in `call`.
status nccl_failure(ncclResult_t e, const char* call, const char* file, int line);
#endif

} // namespace troupe::gpu

/// Returns a troupe::gpu::status from the enclosing function when a CUDA runtime call fails.
#define TROUPE_CUDA_CHECK(expr)                                                                                        \
  do {                                                                                                                 \
    cudaError_t troupe_err_ = (expr);                                                                                  \
    if (troupe_err_ != cudaSuccess)                                                                                    \
      return ::troupe::gpu::cuda_failure(troupe_err_, #expr, __FILE__, __LINE__);                                      \
  } while (0)

/// Returns a troupe::gpu::status from the enclosing function when a cuBLAS call fails.
#define TROUPE_CUBLAS_CHECK(expr)                                                                                      \
  do {                                                                                                                 \
    cublasStatus_t troupe_err_ = (expr);                                                                               \
    if (troupe_err_ != CUBLAS_STATUS_SUCCESS)                                                                          \
      return ::troupe::gpu::cublas_failure(troupe_err_, #expr, __FILE__, __LINE__);                                    \
  } while (0)

#ifdef TROUPE_HAVE_NCCL_HEADER
/// Returns a troupe::gpu::status from the enclosing function when an NCCL call fails.
#define TROUPE_NCCL_CHECK(expr)                                                                                        \
  do {                                                                                                                 \
    ncclResult_t troupe_err_ = (expr);                                                                                 \
    if (troupe_err_ != ncclSuccess)                                                                                    \
      return ::troupe::gpu::nccl_failure(troupe_err_, #expr, __FILE__, __LINE__);                                      \
  } while (0)
#endif

/// Returns from the enclosing function when a call that yields a status failed.
#define TROUPE_GPU_TRY(expr)                                                                                           \
  do {                                                                                                                 \
    ::troupe::gpu::status troupe_st_ = (expr);                                                                         \
    if (!troupe_st_.ok())                                                                                              \
      return troupe_st_;                                                                                               \
  } while (0)

/// Checks that the last kernel launch was accepted (bad configuration, no device).
#define TROUPE_CUDA_CHECK_LAUNCH() TROUPE_CUDA_CHECK(cudaGetLastError())
