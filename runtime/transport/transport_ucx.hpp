// UCX pieces of the UCX transport (internal): the check macro and a worker
// with its endpoint to the one peer it talks to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

#include "runtime/actor/errors.hpp"
#include "runtime/transport/transport.hpp"

namespace troupe::net::detail {

/// "call failed: <status> (file:line)", for errors passed upward.
std::string ucx_failure(ucs_status_t s, const char* call, const char* file, int line);
#define TROUPE_UCX_FAILURE(status, call) ::troupe::net::detail::ucx_failure(status, call, __FILE__, __LINE__)

/// One connection side's UCP worker, its wake-up descriptor and its endpoint.
struct ucx_worker {
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  int efd = -1; ///< readable when the worker has events (after ucp_worker_arm)

  ucx_worker() = default;
  ucx_worker(const ucx_worker&) = delete;
  ucx_worker& operator=(const ucx_worker&) = delete;
  ~ucx_worker(); ///< force-closes the endpoint, destroys the worker

  /// Creates the worker in the process's context (io_failed: why it could not).
  caf::error create();
  /// This worker's address, for the peer to connect to.
  caf::error address(std::vector<std::byte>& out) const;
  /// Creates the endpoint to the peer's worker address; `on_error` reports its
  /// failure. `same_host`: the peer runs on this machine (see peer_mode).
  caf::error connect(const std::vector<std::byte>& remote, ucp_err_handler_cb_t on_error, void* arg, bool same_host);
  /// Closes the endpoint: a forced close when the peer is lost and the endpoint
  /// has UCX's peer error mode (the sends still out to it have completed with
  /// an error by then, see ucx_connection::teardown), otherwise flushing for a
  /// short while (the peer may be gone).
  void close_ep(bool peer_lost);
  /// Closes the endpoint and destroys the worker; no callback runs after this.
  /// `peer_lost`: the connection ended because the peer did.
  void reset(bool peer_lost = false);

  /// Whether the endpoint has UCX's peer error mode: only a peer on another
  /// host has it. In UCX 1.13 the mode rules out the shared-memory transports
  /// (sysv, posix, cma: 3.2 GB/s between two processes here, against 1.8 GB/s
  /// over tcp on loopback), and a remote peer uses none of them anyway.
  bool peer_mode = false;
};

/// Whether the two ends of connected socket `fd` have the same address (the
/// peer runs on this machine, so UCX may use shared memory to reach it).
bool same_host(int fd);

/// Tag of part `part` (0: header, sizes and meta; i + 1: blob i) of frame `seq`.
/// Each part is matched exactly, so no ordering between messages is assumed.
inline ucp_tag_t ucx_tag(std::uint64_t seq, std::size_t part) {
  return (seq << 8) | part;
}

/// The receiving half of a UCX connection, driven by its progress thread.
class ucx_receiver {
public:
  /// Where one posted receive's completion lands.
  struct slot {
    void* req = nullptr;
    bool done = false;
    ucs_status_t status = UCS_OK;
    std::size_t length = 0;
    std::size_t expected = 0;
  };
  /// Why receiving stopped: the peer's fault (`malformed`) or a UCX error.
  struct failure {
    bool malformed = false;
    std::string what;
  };

  ucx_receiver();
  /// Posts the receive of the next frame's header message.
  void start(ucp_worker_h worker);
  /// Completes what has arrived, calling `deliver` with each whole frame;
  /// returns whether anything happened. Stops at the first failure (set in `fail`).
  bool poll(const std::function<void(frame&&)>& deliver, std::optional<failure>& fail);
  /// Cancels and frees what is posted; call before the worker is destroyed.
  void cancel();

private:
  void post(slot& s, void* buf, std::size_t len, ucp_tag_t tag);
  static void release(slot& s);
  static bool check(const slot& s, bool exact, const char* what, std::optional<failure>& fail);
  bool start_frame(std::optional<failure>& fail);

  ucp_worker_h worker_ = nullptr;
  std::vector<std::byte> head_; ///< room for the largest header message
  slot head_slot_;
  std::vector<slot> blobs_; ///< max_blobs of them: posted receives point here
  std::vector<std::uint64_t> sizes_;
  frame frame_;
  bool in_header_ = true;
  std::uint64_t seq_ = 0;
  std::uint64_t delivered_ = 0;

public:
  std::uint64_t delivered() const noexcept { return delivered_; }
};

} // namespace troupe::net::detail
