// UCX pieces of the UCX transport (internal): the check macro and a worker
// with its endpoint to the one peer it talks to.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

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

  /// Creates the worker in the process's context; returns an error text or "".
  std::string create();
  /// This worker's address, for the peer to connect to.
  std::string address(std::vector<std::byte>& out) const;
  /// Creates the endpoint to the peer's worker address; `on_error` reports its failure.
  std::string connect(const std::vector<std::byte>& remote, ucp_err_handler_cb_t on_error, void* arg);
  /// Closes the endpoint, flushing for a short while (the peer may be gone).
  void close_ep();
  /// Closes the endpoint and destroys the worker; no callback runs after this.
  void reset();
};

} // namespace troupe::net::detail
