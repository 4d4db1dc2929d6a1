// The process's UCX context and one worker per connection side: creation,
// addresses, endpoints and the check that says whether UCX works here at all.
#include "runtime/transport/transport_ucx.hpp"

#include <chrono>
#include <cstring>
#include <mutex>
#include <string_view>

#include <netinet/in.h>
#include <sys/socket.h>
#include <ucs/debug/log_def.h>

#include <fmt/format.h>

namespace troupe::net::detail {

std::string ucx_failure(ucs_status_t s, const char* call, const char* file, int line) {
  return fmt::format("{} failed: {} ({}:{})", call, ucs_status_string(s), file, line);
}

namespace {

/// Set while this thread destroys the worker of a connection whose peer is
/// lost and which has no peer error mode (a peer on this host; see
/// ucx_worker::peer_mode): a send still out to that peer can be neither
/// cancelled nor forced closed in UCX 1.13, so destroying the worker makes UCX
/// warn that its request "was not returned to mpool". That request (one per
/// rendezvous send in flight, a few hundred bytes) stays allocated; the warning
/// is not printed, since the loss itself is reported as the connection's end.
thread_local bool destroying_after_lost_peer = false;

ucs_log_func_rc_t on_ucx_log(const char* file, unsigned, const char*, ucs_log_level_t level,
                             const ucs_log_component_config_t*, const char* message, va_list) {
  if (destroying_after_lost_peer && level == UCS_LOG_LEVEL_WARN && std::string_view(file).ends_with("mpool.c") &&
      std::string_view(message).find("was not returned to mpool") != std::string_view::npos) {
    return UCS_LOG_FUNC_RC_STOP;
  }
  return UCS_LOG_FUNC_RC_CONTINUE;
}

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
    ucs_log_push_handler(&on_ucx_log);
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

void ucx_worker::reset(bool peer_lost) {
  if (ep)
    close_ep(peer_lost);
  if (worker) {
    destroying_after_lost_peer = peer_lost && !peer_mode;
    ucp_worker_destroy(worker);
    destroying_after_lost_peer = false;
  }
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

caf::error ucx_worker::connect(const std::vector<std::byte>& remote, ucp_err_handler_cb_t on_error, void* arg,
                               bool same_host) {
  if (remote.empty())
    return make_error(errc::io_failed, "the peer sent an empty UCX worker address");
  ucp_ep_params_t p{};
  p.field_mask =
    UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.address = reinterpret_cast<const ucp_address_t*>(remote.data());
  // A dead peer shows up as the end of the bootstrap socket either way; with
  // the peer mode UCX also completes the sends still out to it (with an error).
  peer_mode = !same_host;
  p.err_mode = peer_mode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  p.err_handler.cb = on_error;
  p.err_handler.arg = arg;
  if (auto s = ucp_ep_create(worker, &p, &ep); s != UCS_OK) {
    ep = nullptr;
    return make_error(errc::io_failed, TROUPE_UCX_FAILURE(s, "ucp_ep_create"));
  }
  return {};
}

void ucx_worker::close_ep(bool peer_lost) {
  // Bounded, since the peer may be gone: destroying the worker ends it anyway.
  // A flushing close, or a forced one when the peer is lost (that needs the peer error mode).
  ucp_request_param_t p{};
  if (peer_lost && peer_mode) {
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  }
  auto* req = ucp_ep_close_nbx(ep, &p);
  ep = nullptr;
  if (!UCS_PTR_IS_PTR(req))
    return;
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (ucp_request_check_status(req) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until)
    ucp_worker_progress(worker);
  ucp_request_free(req);
}

bool same_host(int fd) {
  sockaddr_storage mine{}, theirs{};
  socklen_t a = sizeof mine, b = sizeof theirs;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &a) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &b) != 0 || mine.ss_family != theirs.ss_family)
    return false;
  if (mine.ss_family == AF_INET)
    return reinterpret_cast<const sockaddr_in&>(mine).sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in&>(theirs).sin_addr.s_addr;
  if (mine.ss_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6&>(mine).sin6_addr,
                       &reinterpret_cast<const sockaddr_in6&>(theirs).sin6_addr, sizeof(in6_addr)) == 0;
  return mine.ss_family == AF_UNIX;
}

} // namespace troupe::net::detail
