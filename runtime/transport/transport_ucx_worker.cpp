// The process's UCX context and one worker per connection side: creation,
// addresses, endpoints and the check that says whether UCX works here at all.
#include "runtime/transport/transport_ucx.hpp"

#include <chrono>
#include <mutex>

#include <fmt/format.h>

namespace troupe::net::detail {

std::string ucx_failure(ucs_status_t s, const char* call, const char* file, int line) {
  return fmt::format("{} failed: {} ({}:{})", call, ucs_status_string(s), file, line);
}

namespace {

struct ucx_context {
  ucp_context_h ctx = nullptr;
  std::string error; ///< why it could not be created
};

/// Created on first use and never destroyed: workers may outlive static destructors.
ucx_context& context() {
  static ucx_context* c = [] {
    auto* r = new ucx_context;
    ucp_config_t* config = nullptr;
    if (auto s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) {
      r->error = TROUPE_UCX_FAILURE(s, "ucp_config_read");
      return r;
    }
    ucp_params_t p{};
    p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    p.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    p.mt_workers_shared = 1; // workers are created and destroyed on many threads
    if (auto s = ucp_init(&p, config, &r->ctx); s != UCS_OK) {
      r->error = TROUPE_UCX_FAILURE(s, "ucp_init");
      r->ctx = nullptr;
    }
    ucp_config_release(config);
    return r;
  }();
  return *c;
}

} // namespace

std::optional<std::string> ucx_unavailable_reason() {
  static std::optional<std::string> why = []() -> std::optional<std::string> {
    ucx_worker w;
    if (auto err = w.create())
      return "UCX cannot initialise here: " + error_message(err);
    return std::nullopt;
  }();
  return why;
}

ucx_worker::~ucx_worker() {
  reset();
}

void ucx_worker::reset() {
  if (ep)
    close_ep();
  if (worker)
    ucp_worker_destroy(worker);
  worker = nullptr;
  efd = -1;
}

caf::error ucx_worker::create() {
  auto& c = context();
  if (!c.ctx)
    return make_error(errc::io_failed, c.error);
  ucp_worker_params_t p{};
  p.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  p.thread_mode = UCS_THREAD_MODE_SERIALIZED; // set up on one thread, then driven by the progress thread
  if (auto s = ucp_worker_create(c.ctx, &p, &worker); s != UCS_OK) {
    worker = nullptr;
    return make_error(errc::io_failed, TROUPE_UCX_FAILURE(s, "ucp_worker_create"));
  }
  if (auto s = ucp_worker_get_efd(worker, &efd); s != UCS_OK)
    return make_error(errc::io_failed, TROUPE_UCX_FAILURE(s, "ucp_worker_get_efd"));
  return {};
}

caf::error ucx_worker::address(std::vector<std::byte>& out) const {
  ucp_address_t* addr = nullptr;
  std::size_t len = 0;
  if (auto s = ucp_worker_get_address(worker, &addr, &len); s != UCS_OK)
    return make_error(errc::io_failed, TROUPE_UCX_FAILURE(s, "ucp_worker_get_address"));
  auto* p = reinterpret_cast<const std::byte*>(addr);
  out.assign(p, p + len);
  ucp_worker_release_address(worker, addr);
  return {};
}

caf::error ucx_worker::connect(const std::vector<std::byte>& remote, ucp_err_handler_cb_t on_error, void* arg) {
  if (remote.empty())
    return make_error(errc::io_failed, "the peer sent an empty UCX worker address");
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  p.address = reinterpret_cast<const ucp_address_t*>(remote.data());
  // No UCP_ERR_HANDLING_MODE_PEER: in UCX 1.13 it rules out the shared-memory
  // transports (sysv, posix, cma) and leaves only tcp. A dead peer shows up as
  // the end of the bootstrap socket instead.
  p.err_handler.cb = on_error;
  p.err_handler.arg = arg;
  if (auto s = ucp_ep_create(worker, &p, &ep); s != UCS_OK) {
    ep = nullptr;
    return make_error(errc::io_failed, TROUPE_UCX_FAILURE(s, "ucp_ep_create"));
  }
  return {};
}

void ucx_worker::close_ep() {
  // A flushing close (forcing one needs the peer error mode, see connect);
  // bounded, since the peer may be gone: destroying the worker ends it anyway.
  ucp_request_param_t p{};
  auto* req = ucp_ep_close_nbx(ep, &p);
  ep = nullptr;
  if (!UCS_PTR_IS_PTR(req))
    return;
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (ucp_request_check_status(req) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until)
    ucp_worker_progress(worker);
  ucp_request_free(req);
}

} // namespace troupe::net::detail
