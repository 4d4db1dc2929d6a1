// Turns CUDA, cuBLAS and NCCL error codes into status messages, and probes for a GPU.
#include "kernels/cuda/check.hpp"

#include <string>

namespace troupe::gpu {

namespace {

std::string where(const char* file, int line, const char* call) {
  return std::string{file} + ":" + std::to_string(line) + ": " + call + ": ";
}

} // namespace

bool cuda_available() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError(); // clear the sticky error so later calls start clean
    return false;
  }
  return n > 0;
}

status cuda_failure(cudaError_t e, const char* call, const char* file, int line) {
  return status::failure(where(file, line, call) + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

status cublas_failure(cublasStatus_t e, const char* call, const char* file, int line) {
  return status::failure(where(file, line, call) + cublasGetStatusName(e) + " (" + cublasGetStatusString(e) + ")");
}

#ifdef TROUPE_HAVE_NCCL_HEADER
status nccl_failure(ncclResult_t e, const char* call, const char* file, int line) {
  // Named here rather than by ncclGetErrorString, so the kernels need not link NCCL.
  const char* name = "unknown NCCL result";
  switch (e) {
  case ncclSuccess:
    name = "ncclSuccess";
    break;
  case ncclUnhandledCudaError:
    name = "ncclUnhandledCudaError (a CUDA call inside NCCL failed)";
    break;
  case ncclSystemError:
    name = "ncclSystemError (a system call failed)";
    break;
  case ncclInternalError:
    name = "ncclInternalError";
    break;
  case ncclInvalidArgument:
    name = "ncclInvalidArgument";
    break;
  case ncclInvalidUsage:
    name = "ncclInvalidUsage";
    break;
  case ncclRemoteError:
    name = "ncclRemoteError (a peer failed or disconnected)";
    break;
  case ncclInProgress:
    name = "ncclInProgress";
    break;
  default:
    break;
  }
  return status::failure(where(file, line, call) + name + " (code " + std::to_string(static_cast<int>(e)) + ")");
}
#endif

} // namespace troupe::gpu
