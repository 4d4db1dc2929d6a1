// NCCL communicator, send/receive and all-reduce through libnccl loaded with
// dlopen: the table of entry points is filled once, on first use.
#include "kernels/cuda/nccl_channel.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <utility>

#ifndef TROUPE_HAVE_NCCL_HEADER
#error "kernels/cuda/nccl_channel.cpp needs nccl.h (the CUDA toolkit's NCCL headers)"
#endif

namespace troupe::gpu {

namespace {

struct nccl_api {
  bool ok = false;
  std::string why;
  ncclResult_t (*get_version)(int*) = nullptr;
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
};

const nccl_api& api() {
  static nccl_api a;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = nullptr;
    for (const char* name : {"libnccl.so.2", "libnccl.so"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
        break;
    if (!lib) {
      const char* e = dlerror();
      a.why = std::string{"libnccl.so.2 cannot be loaded: "} + (e ? e : "not found");
      return;
    }
    bool all = true;
    auto get = [&](auto& fn, const char* sym) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, sym));
      if (!fn) {
        all = false;
        a.why = std::string{"libnccl lacks "} + sym;
      }
    };
    get(a.get_version, "ncclGetVersion");
    get(a.get_unique_id, "ncclGetUniqueId");
    get(a.comm_init_rank, "ncclCommInitRank");
    get(a.comm_destroy, "ncclCommDestroy");
    get(a.comm_get_async_error, "ncclCommGetAsyncError");
    get(a.send, "ncclSend");
    get(a.recv, "ncclRecv");
    get(a.all_reduce, "ncclAllReduce");
    get(a.group_start, "ncclGroupStart");
    get(a.group_end, "ncclGroupEnd");
    a.ok = all;
  });
  return a;
}

#define TROUPE_NCCL_REQUIRE_API(where)                                                                                 \
  do {                                                                                                                 \
    if (!api().ok)                                                                                                     \
      return status::failure(std::string{where} + ": NCCL is not available: " + api().why);                            \
  } while (0)

status to_nccl(dtype t, ncclDataType_t& out, const char* where) {
  switch (t) {
  case dtype::f32:
    out = ncclFloat32;
    return {};
  case dtype::bf16:
    out = ncclBfloat16;
    return {};
  case dtype::f16:
    out = ncclFloat16;
    return {};
  case dtype::i32:
    out = ncclInt32;
    return {};
  case dtype::u8:
    out = ncclUint8;
    return {};
  }
  return status::failure(std::string{where} + ": no NCCL type for this dtype");
}

ncclComm_t comm_of(void* p) {
  return static_cast<ncclComm_t>(p);
}

} // namespace

bool nccl_available() noexcept {
  return api().ok;
}

status nccl_version(int& out) {
  TROUPE_NCCL_REQUIRE_API("nccl_version");
  TROUPE_NCCL_CHECK(api().get_version(&out));
  return {};
}

status nccl_make_id(nccl_id& out) {
  TROUPE_NCCL_REQUIRE_API("nccl_make_id");
  ncclUniqueId id;
  TROUPE_NCCL_CHECK(api().get_unique_id(&id));
  static_assert(sizeof id.internal == sizeof out.bytes);
  std::copy(std::begin(id.internal), std::end(id.internal), out.bytes.begin());
  return {};
}

nccl_communicator::nccl_communicator(nccl_communicator&& o) noexcept
    : comm_(std::exchange(o.comm_, nullptr)), rank_(o.rank_), size_(o.size_) {}

nccl_communicator& nccl_communicator::operator=(nccl_communicator&& o) noexcept {
  std::swap(comm_, o.comm_);
  std::swap(rank_, o.rank_);
  std::swap(size_, o.size_);
  return *this;
}

nccl_communicator::~nccl_communicator() {
  if (comm_ && api().ok)
    api().comm_destroy(comm_of(comm_));
}

status nccl_communicator::init(const nccl_id& id, int nranks, int rank, int device) {
  TROUPE_NCCL_REQUIRE_API("nccl_communicator::init");
  if (comm_)
    return status::failure("nccl_communicator::init: already initialised");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return status::failure("nccl_communicator::init: rank " + std::to_string(rank) + " is not in [0, " +
                           std::to_string(nranks) + ")");
  TROUPE_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId uid;
  std::copy(id.bytes.begin(), id.bytes.end(), uid.internal);
  ncclComm_t c = nullptr;
  TROUPE_NCCL_CHECK(api().comm_init_rank(&c, nranks, uid, rank));
  comm_ = c;
  rank_ = rank;
  size_ = nranks;
  return {};
}

status nccl_communicator::send(const void* data, std::size_t count, dtype type, int peer, cudaStream_t stream) {
  TROUPE_NCCL_REQUIRE_API("nccl_communicator::send");
  if (!comm_)
    return status::failure("nccl_communicator::send: not initialised");
  ncclDataType_t t;
  TROUPE_GPU_TRY(to_nccl(type, t, "nccl_communicator::send"));
  TROUPE_NCCL_CHECK(api().send(data, count, t, peer, comm_of(comm_), stream));
  return {};
}

status nccl_communicator::recv(void* data, std::size_t count, dtype type, int peer, cudaStream_t stream) {
  TROUPE_NCCL_REQUIRE_API("nccl_communicator::recv");
  if (!comm_)
    return status::failure("nccl_communicator::recv: not initialised");
  ncclDataType_t t;
  TROUPE_GPU_TRY(to_nccl(type, t, "nccl_communicator::recv"));
  TROUPE_NCCL_CHECK(api().recv(data, count, t, peer, comm_of(comm_), stream));
  return {};
}

status nccl_communicator::send_recv(const void* send_data, std::size_t send_count, int send_peer, void* recv_data,
                                    std::size_t recv_count, int recv_peer, dtype type, cudaStream_t stream) {
  TROUPE_NCCL_REQUIRE_API("nccl_communicator::send_recv");
  TROUPE_NCCL_CHECK(api().group_start());
  status s1 = send(send_data, send_count, type, send_peer, stream);
  status s2 = s1.ok() ? recv(recv_data, recv_count, type, recv_peer, stream) : status{};
  ncclResult_t end = api().group_end(); // always close the group
  if (!s1.ok())
    return s1;
  if (!s2.ok())
    return s2;
  TROUPE_NCCL_CHECK(end);
  return {};
}

status nccl_communicator::all_reduce(const void* send_data, void* recv_data, std::size_t count, dtype type,
                                     nccl_reduce op, cudaStream_t stream) {
  TROUPE_NCCL_REQUIRE_API("nccl_communicator::all_reduce");
  if (!comm_)
    return status::failure("nccl_communicator::all_reduce: not initialised");
  ncclDataType_t t;
  TROUPE_GPU_TRY(to_nccl(type, t, "nccl_communicator::all_reduce"));
  ncclRedOp_t o = op == nccl_reduce::sum   ? ncclSum
                  : op == nccl_reduce::avg ? ncclAvg
                  : op == nccl_reduce::max ? ncclMax
                                           : ncclMin;
  TROUPE_NCCL_CHECK(api().all_reduce(send_data, recv_data, count, t, o, comm_of(comm_), stream));
  return {};
}

namespace {
status require_cuda(const tensor_handle& t, const char* where) {
  if (!t.defined() || !t.device().is_cuda())
    return status::failure(std::string{where} + ": the tensor must be defined and on a CUDA device");
  return {};
}
} // namespace

status nccl_communicator::send(const tensor_handle& t, int peer, cudaStream_t stream) {
  TROUPE_GPU_TRY(require_cuda(t, "nccl_communicator::send"));
  return send(t.raw(), std::size_t(t.numel()), t.type(), peer, stream);
}

status nccl_communicator::recv(tensor_handle& t, int peer, cudaStream_t stream) {
  TROUPE_GPU_TRY(require_cuda(t, "nccl_communicator::recv"));
  return recv(t.raw(), std::size_t(t.numel()), t.type(), peer, stream);
}

status nccl_communicator::all_reduce(tensor_handle& t, nccl_reduce op, cudaStream_t stream) {
  TROUPE_GPU_TRY(require_cuda(t, "nccl_communicator::all_reduce"));
  return all_reduce(t.raw(), t.raw(), std::size_t(t.numel()), t.type(), op, stream);
}

status nccl_communicator::check_async() {
  TROUPE_NCCL_REQUIRE_API("nccl_communicator::check_async");
  if (!comm_)
    return {};
  ncclResult_t e = ncclSuccess;
  TROUPE_NCCL_CHECK(api().comm_get_async_error(comm_of(comm_), &e));
  TROUPE_NCCL_CHECK(e);
  return {};
}

} // namespace troupe::gpu
