// The UCX transport: a TCP socket authenticates the peer and later carries the
// goodbye; frames travel as tagged UCP messages, over shared memory (posix, sysv,
// cma) between processes on one machine and TCP across machines.
#include "runtime/transport/transport_ucx.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <cstdlib>
#include <list>

#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/actor/errors.hpp"
#include "runtime/transport/link_model.hpp"
#include "runtime/transport/transport_detail.hpp"

namespace troupe::net::detail {

namespace {

using clock = std::chrono::steady_clock;
constexpr auto grace = std::chrono::seconds(2);
constexpr int setup_timeout_ms = 10'000;

/// How long an idle progress thread keeps polling before it arms the worker and
/// sleeps: a reply that comes within it is seen without a wake-up (an eventfd or
/// shared-memory signal and a context switch, each several microseconds). Bounded, and
/// yielding while it polls, so an idle node burns no core and a busy peer on the
/// same core still runs. TROUPE_UCX_SPIN_US overrides it (0: sleep at once; at
/// most 1000; anything else is reported and keeps the default).
std::chrono::microseconds idle_spin() {
  static const auto us = [] {
    constexpr long fallback = 50;
    const char* v = std::getenv("TROUPE_UCX_SPIN_US");
    if (!v || !*v)
      return fallback;
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (*end == 0 && n >= 0 && n <= 1000)
      return n;
    fmt::print(stderr, "troupe: TROUPE_UCX_SPIN_US={} is not a whole number of microseconds from 0 to 1000; using {}\n",
               v, fallback);
    return fallback;
  }();
  return std::chrono::microseconds(us);
}

/// A frame on its way out, alive until every part has completed.
struct tx_frame {
  frame f;
  clock::time_point at;
  std::vector<std::byte> head;                      ///< header, sizes and meta: part 0
  std::vector<std::pair<void*, std::size_t>> parts; ///< buffer and size of each part
  std::vector<std::size_t> tags;                    ///< part index on the wire
  std::vector<std::size_t> ends;                    ///< bytes up to the end of each part
  std::size_t posted = 0;
  int pending = 0;
  bool scheduled = false;
  clock::time_point start{};
  std::optional<std::string>* failure = nullptr;
};

void on_sent(void* req, ucs_status_t status, void* user) {
  auto* t = static_cast<tx_frame*>(user);
  --t->pending;
  if (status != UCS_OK && status != UCS_ERR_CANCELED && !*t->failure)
    *t->failure = ucs_status_string(status);
  ucp_request_free(req);
}

/// One UCX connection side: a worker, its endpoint to the peer, the bootstrap
/// socket and a progress thread that posts sends, completes receives and
/// delivers frames. Closing is a goodbye on the socket carrying how many frames
/// were sent, so the other side delivers all of them before it ends.
///
/// Destroying it closes (flushing up to a grace period) and joins the thread,
/// so it must not be destroyed from inside one of its own handlers.
class ucx_connection final : public connection_base {
public:
  ucx_connection(fd_t sock, std::string peer, handlers h, link_model link, std::shared_ptr<const server_options> accept)
      : connection_base(std::move(peer), std::move(h)), sock_(std::move(sock)), wake_(::eventfd(0, EFD_CLOEXEC)),
        pacer_(link), accept_(std::move(accept)) {
    if (accept_)
      start(); // the thread authenticates first
  }

  ~ucx_connection() override {
    close();
    if (thread_.joinable()) {
      {
        std::unique_lock lock{mtx_};
        if (!in_loop_ || !cv_.wait_for(lock, 2 * grace + std::chrono::seconds(1), [&] { return finished_.load(); }))
          abort_ = true; // still authenticating, or the peer never answered: stop without it
      }
      if (abort_)
        ::shutdown(sock_.get(), SHUT_RDWR); // ends a handshake waiting for the peer
      wake();
      thread_.join();
    }
  }

  /// Client side, on the caller's thread: hello, worker addresses both ways.
  caf::error setup_client(const connect_options& opts) {
    auto cannot = [&](const caf::error& err) {
      return make_error(errc::io_failed,
                        fmt::format("cannot connect to {}:{} with ucx: {}", opts.host, opts.port, error_message(err)));
    };
    if (auto err = ucx_.create())
      return cannot(err);
    auto welcome = send_hello(sock_.get(), opts);
    if (!welcome)
      return welcome.error();
    std::vector<std::byte> mine;
    auto err = ucx_.address(mine);
    if (!err)
      err = ucx_.connect(*welcome, &on_ep_error, this, same_host(sock_.get()));
    if (!err)
      err = write_control(sock_.get(), frame_type::address, 0, mine);
    return err ? cannot(err) : caf::error{};
  }

  void start() {
    in_loop_ = !accept_; // a client has authenticated already; a server's thread does it first
    thread_ = std::thread([this] { run(); });
  }

  void send(frame f) override {
    check_sendable(f);
    auto t = std::make_unique<tx_frame>();
    t->f = std::move(f);
    t->at = clock::now();
    {
      std::lock_guard lock{mtx_};
      if (closing_ || abort_)
        return; // on_close has told (or will tell) the owner
      incoming_.push_back(std::move(t));
    }
    if (sleeping_) // an awake progress thread finds the frame without the syscall
      wake();
  }

  void close() override {
    {
      std::lock_guard lock{mtx_};
      local_close_ = true;
      if (!closing_) {
        closing_ = true;
        close_deadline_ = clock::now() + grace;
      }
    }
    wake();
  }

private:
  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* self = static_cast<ucx_connection*>(arg);
    self->fail(fmt::format("the UCX endpoint to {} failed: {}", self->peer_, ucs_status_string(status)));
  }

  void wake() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
  }

  void fail(std::string why) {
    if (!failure_ && !(peer_bye_ && bye_sent_))
      failure_ = std::move(why);
  }

  /// Server side, on the progress thread: hello, then worker addresses both ways.
  bool setup_server() {
    auto ok = accept_hello(sock_.get(), *accept_, peer_, [this](std::vector<std::byte>& meta) {
      auto err = ucx_.create();
      return err ? err : ucx_.address(meta);
    });
    if (!ok)
      return false;
    header h;
    frame f;
    auto r = read_frame(sock_.get(), limits{max_meta_bytes, 0}, h, f, setup_timeout_ms);
    if (r.status == read_status::ok && h.type != frame_type::address)
      r = {read_status::bad, fmt::format("expected its UCX address, got frame type {}", static_cast<int>(h.type))};
    if (r.status == read_status::ok)
      if (auto err = ucx_.connect(f.meta, &on_ep_error, this, same_host(sock_.get())))
        r = {read_status::bad, error_message(err)};
    if (r.status != read_status::ok)
      log_line(*accept_, fmt::format("rejected connection from {}: {}", peer_, r.what));
    return r.status == read_status::ok;
  }

  void run() {
    if (accept_ && !setup_server()) {
      teardown();
      finish();
      return;
    }
    in_loop_ = true;
    rx_.start(ucx_.worker);
    auto next_socket_check = clock::now();
    auto idle_since = clock::time_point::max();
    const auto spin = idle_spin();
    for (;;) {
      bool busy = false;
      while (ucp_worker_progress(ucx_.worker) != 0)
        busy = true;
      busy |= post_sends();
      busy |= receive();
      auto now = clock::now();
      if (now >= next_socket_check) {
        poll_socket(0);
        next_socket_check = now + std::chrono::milliseconds(1);
      }
      if (done())
        break;
      if (busy) {
        idle_since = clock::time_point::max();
        continue;
      }
      // Idle: poll on for a bounded time, yielding the core each turn (an
      // unyielding spin of 30 us starved the peer on a 2-core machine: ping-pong
      // 115 us instead of 50 us), then arm the worker and sleep.
      now = clock::now();
      idle_since = std::min(idle_since, now);
      if (now - idle_since < spin) {
        ::sched_yield();
        continue;
      }
      if (ucp_worker_arm(ucx_.worker) == UCS_ERR_BUSY)
        continue;
      // Senders write the wake-up descriptor only while this is set (see send);
      // a frame queued before it was set is seen here instead.
      sleeping_ = true;
      bool queued = false;
      {
        std::lock_guard lock{mtx_};
        queued = !incoming_.empty();
      }
      if (!queued)
        sleep_until_event();
      sleeping_ = false;
      idle_since = clock::time_point::max();
    }
    auto why = why_closed();
    teardown();
    notify_closed(why);
    finish();
  }

  /// Blocks until the worker, the wake-up descriptor or the socket has news, or
  /// the next paced release or the close deadline comes.
  void sleep_until_event() {
    auto until = next_release_;
    {
      std::lock_guard lock{mtx_};
      if (closing_)
        until = std::min(until, close_deadline_ + grace);
    }
    timespec ts{};
    timespec* timeout = nullptr;
    if (until != clock::time_point::max()) {
      auto ns =
        std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(until - clock::now()).count());
      ts = {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
      timeout = &ts;
    }
    pollfd fds[3] = {{ucx_.efd, POLLIN, 0}, {wake_.get(), POLLIN, 0}, {sock_.get(), POLLIN, 0}};
    ::ppoll(fds, sock_open_ ? 3 : 2, timeout, nullptr);
    if (fds[1].revents & POLLIN) {
      std::uint64_t n;
      [[maybe_unused]] auto r = ::read(wake_.get(), &n, sizeof n);
    }
    if (sock_open_ && fds[2].revents)
      poll_socket(0);
  }

  /// Reads what the socket has: the peer's goodbye, or its end.
  void poll_socket(int timeout_ms) {
    while (sock_open_) {
      pollfd pfd{sock_.get(), POLLIN, 0};
      if (::poll(&pfd, 1, timeout_ms) <= 0)
        return;
      header h;
      frame f;
      auto r = read_frame(sock_.get(), limits{64, 0}, h, f, 1000);
      if (r.status == read_status::ok && h.type == frame_type::bye && f.meta.size() == 8) {
        std::memcpy(&peer_total_, f.meta.data(), 8);
        peer_bye_ = true;
        std::lock_guard lock{mtx_};
        if (!closing_) {
          closing_ = true; // answer with our own goodbye once our sends are out
          close_deadline_ = clock::now() + grace;
        }
        continue;
      }
      sock_open_ = false;
      if (peer_bye_)
        return; // it said goodbye before hanging up
      if (r.status == read_status::eof)
        fail(fmt::format("{} closed the connection abruptly (no goodbye)", peer_));
      else if (r.status == read_status::ok)
        fail(fmt::format("{} sent an unexpected control frame of type {}", peer_, static_cast<int>(h.type)));
      else
        fail(fmt::format("the control socket to {} failed: {}", peer_, r.what));
    }
  }

  /// Moves queued frames out: each part is posted when the emulated link (if
  /// any) releases it. Returns whether anything happened.
  bool post_sends() {
    {
      std::lock_guard lock{mtx_};
      while (!incoming_.empty()) {
        to_post_.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
    }
    bool any = false;
    auto now = clock::now();
    next_release_ = clock::time_point::max();
    while (!to_post_.empty() && !failure_) {
      auto& t = *to_post_.front();
      if (t.parts.empty())
        prepare(t);
      if (pacer_.active() && !t.scheduled) {
        t.start = pacer_.start(t.ends.back(), t.at);
        t.scheduled = true;
      }
      while (t.posted < t.parts.size()) {
        if (pacer_.active()) {
          if (auto due = pacer_.release(t.start, t.ends[t.posted]); due > now) {
            next_release_ = due;
            return any;
          }
        }
        ucp_request_param_t p{};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.send = on_sent;
        p.user_data = &t;
        auto [buf, len] = t.parts[t.posted];
        auto* r = ucp_tag_send_nbx(ucx_.ep, buf, len, ucx_tag(tx_seq_, t.tags[t.posted]), &p);
        if (UCS_PTR_IS_ERR(r)) {
          fail(
            fmt::format("sending to {} failed: {}", peer_, TROUPE_UCX_FAILURE(UCS_PTR_STATUS(r), "ucp_tag_send_nbx")));
          return any;
        }
        t.pending += r != nullptr;
        ++t.posted;
        any = true;
      }
      ++tx_seq_;
      in_flight_.push_back(std::move(to_post_.front()));
      to_post_.pop_front();
    }
    in_flight_.remove_if([](auto& t) { return t->pending == 0; });
    if (send_failure_)
      fail(fmt::format("sending to {} failed: {}", peer_, *send_failure_));
    return any;
  }

  void prepare(tx_frame& t) {
    t.head = encode_header(frame_type::data, t.f.kind, t.f.meta.size(), t.f.blobs);
    t.head.insert(t.head.end(), t.f.meta.begin(), t.f.meta.end());
    t.parts.emplace_back(t.head.data(), t.head.size());
    t.tags.push_back(0);
    for (std::size_t i = 0; i < t.f.blobs.size(); ++i)
      if (auto& b = t.f.blobs[i]; b.defined() && b.nbytes() > 0) {
        t.parts.emplace_back(b.raw(), b.nbytes()); // sent from the tensor itself, no copy
        t.tags.push_back(i + 1);
      }
    std::size_t end = 0;
    for (auto& part : t.parts)
      t.ends.push_back(end += part.second);
    t.failure = &send_failure_;
  }

  /// Delivers the frames that have arrived; returns whether anything happened.
  bool receive() {
    std::optional<ucx_receiver::failure> f;
    bool any = rx_.poll([this](frame&& fr) { deliver(std::move(fr)); }, f);
    if (!f)
      return any;
    if (f->malformed && accept_)
      log_line(*accept_, fmt::format("rejected connection from {}: {}", peer_, f->what));
    fail(f->malformed ? fmt::format("{} sent a malformed frame: {}", peer_, f->what)
                      : fmt::format("receiving from {} failed: {}", peer_, f->what));
    return true;
  }

  /// Whether the loop should end; sends our goodbye once closing has flushed.
  bool done() {
    if (abort_ || failure_)
      return true;
    auto now = clock::now();
    bool send_bye = false;
    clock::time_point deadline;
    {
      std::lock_guard lock{mtx_};
      deadline = close_deadline_;
      send_bye = closing_ && !bye_sent_ &&
                 ((incoming_.empty() && to_post_.empty() && in_flight_.empty()) || now > close_deadline_);
    }
    if (send_bye) {
      bye_sent_ = true;
      std::byte count[8];
      std::memcpy(count, &tx_seq_, 8);
      if (auto err = write_control(sock_.get(), frame_type::bye, 0, count); err && !peer_bye_)
        fail(fmt::format("saying goodbye to {} failed: {}", peer_, error_message(err)));
    }
    if (bye_sent_ && peer_bye_ && rx_.delivered() >= peer_total_)
      return true;
    return bye_sent_ && now > deadline + grace; // the peer did not answer in time
  }

  std::string why_closed() {
    if (failure_)
      return *failure_;
    std::lock_guard lock{mtx_};
    if (local_close_ || abort_)
      return "closed by this side";
    return fmt::format("{} closed the connection", peer_);
  }

  /// Cancels what is posted, closes the endpoint, destroys the worker (after
  /// which no callback can run) and only then drops the frames.
  void teardown() {
    rx_.cancel();
    if (failure_ && ucx_.peer_mode) {
      // Once UCX sees the endpoint fail (the peer's tcp connection reset, or its
      // keepalive), it completes every send still out on it with an error, so
      // none is left for the worker's end to warn about. The bootstrap socket's
      // end usually tells us first: wait for that, bounded.
      auto until = clock::now() + std::chrono::seconds(1);
      auto out = [&] {
        return std::any_of(in_flight_.begin(), in_flight_.end(), [](auto& t) { return t->pending > 0; });
      };
      while (out() && clock::now() < until)
        ucp_worker_progress(ucx_.worker);
    }
    ucx_.reset(failure_.has_value());
    in_flight_.clear();
    to_post_.clear();
    std::lock_guard lock{mtx_};
    incoming_.clear();
    ::shutdown(sock_.get(), SHUT_RDWR);
  }

  void finish() {
    std::lock_guard lock{mtx_};
    finished_ = true;
    cv_.notify_all();
  }

  fd_t sock_;
  fd_t wake_;
  link_pacer pacer_;
  std::shared_ptr<const server_options> accept_;
  ucx_worker ucx_;

  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<tx_frame>> incoming_; // guarded by mtx_, like the next three
  bool closing_ = false;
  bool local_close_ = false;
  clock::time_point close_deadline_{};
  std::atomic<bool> abort_{false};
  std::atomic<bool> in_loop_{false}; // past the handshake
  std::atomic<bool> sleeping_{true}; // the progress thread may be asleep: senders wake it

  // The progress thread's own state.
  std::deque<std::unique_ptr<tx_frame>> to_post_;
  std::list<std::unique_ptr<tx_frame>> in_flight_;
  std::uint64_t tx_seq_ = 0;
  std::optional<std::string> send_failure_; ///< why a send completed in error
  clock::time_point next_release_ = clock::time_point::max();
  ucx_receiver rx_;
  bool peer_bye_ = false;
  bool bye_sent_ = false;
  bool sock_open_ = true;
  std::uint64_t peer_total_ = 0;
  std::optional<std::string> failure_; ///< why the connection ends
  std::thread thread_;
};

} // namespace

caf::expected<std::unique_ptr<server>> ucx_listen(server_options opts, handlers h) {
  if (auto why = ucx_unavailable_reason())
    return make_error(errc::io_failed,
                      fmt::format("cannot listen with ucx on {}:{}: {}", opts.address, opts.port, *why));
  return socket_server_of<ucx_connection>(opts, std::move(h));
}

caf::expected<std::unique_ptr<connection>> ucx_connect(connect_options opts, handlers h) {
  auto fd = connect_socket(opts.host, opts.port, opts.timeout);
  if (!fd)
    return fd.error();
  auto peer = fmt::format("{}:{}", opts.host, opts.port);
  auto c = std::make_unique<ucx_connection>(std::move(*fd), peer, std::move(h), opts.link, nullptr);
  if (auto err = c->setup_client(opts))
    return err;
  c->start();
  return std::unique_ptr<connection>(std::move(c));
}

} // namespace troupe::net::detail
