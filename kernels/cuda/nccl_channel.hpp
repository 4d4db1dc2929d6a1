// NCCL transport between GPU actors: a communicator with point-to-point
// send/receive (pipeline channels) and all-reduce (data-parallel peers).
// libnccl is loaded at run time, so builds and machines without it still work:
// every call then returns a failure status saying NCCL is missing.
#pragma once

#include <array>
#include <cstddef>

#include <cuda_runtime_api.h>

#include "kernels/cuda/check.hpp"
#include "runtime/tensor/dtype.hpp"
#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::gpu {

/// True when libnccl could be loaded and exports what nccl_communicator uses.
bool nccl_available() noexcept;
/// NCCL's version code (e.g. 22805 for 2.28.5), or a failure when it is missing.
status nccl_version(int& out);

/// The 128-byte id that names one communicator; rank 0 makes it and sends it
/// to the other ranks by any means (e.g. an actor message).
struct nccl_id {
  std::array<char, 128> bytes{};
};
status nccl_make_id(nccl_id& out);

/// How all_reduce combines the ranks' buffers.
enum class nccl_reduce { sum, avg, max, min };

/// One rank's handle on a communicator; all collective and point-to-point calls
/// are queued on the caller's CUDA stream and return once queued.
class nccl_communicator {
public:
  nccl_communicator() = default;
  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;
  nccl_communicator(nccl_communicator&& o) noexcept;
  nccl_communicator& operator=(nccl_communicator&& o) noexcept;
  ~nccl_communicator();

  /// Joins communicator `id` as `rank` of `nranks` on CUDA device `device`.
  /// Blocks until every rank has joined (call from one thread or process per rank).
  status init(const nccl_id& id, int nranks, int rank, int device);

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  bool ready() const noexcept { return comm_ != nullptr; }

  /// Sends `count` elements of `type` at device pointer `data` to rank `peer`,
  /// which must post the matching recv.
  status send(const void* data, std::size_t count, dtype type, int peer, cudaStream_t stream);
  status recv(void* data, std::size_t count, dtype type, int peer, cudaStream_t stream);
  /// A send to and a receive from the same or different peers, progressed together
  /// (the pattern of pipeline stages exchanging activations and gradients).
  status send_recv(const void* send_data, std::size_t send_count, int send_peer, void* recv_data,
                   std::size_t recv_count, int recv_peer, dtype type, cudaStream_t stream);
  /// recv[i] = op over ranks of send[i], for `count` elements; send may equal recv.
  status all_reduce(const void* send_data, void* recv_data, std::size_t count, dtype type, nccl_reduce op,
                    cudaStream_t stream);

  /// The same calls on whole device tensors.
  status send(const tensor_handle& t, int peer, cudaStream_t stream);
  status recv(tensor_handle& t, int peer, cudaStream_t stream);
  status all_reduce(tensor_handle& t, nccl_reduce op, cudaStream_t stream);

  /// A failure when an asynchronous NCCL error (e.g. a peer died) was recorded.
  status check_async();

private:
  void* comm_ = nullptr; ///< ncclComm_t
  int rank_ = -1, size_ = 0;
};

} // namespace troupe::gpu
