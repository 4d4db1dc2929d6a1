// The TCP transport: one socket per connection, a sender thread (which also
// paces an emulated link) and a receiver thread that reads frames into pooled blobs.
#include <condition_variable>
#include <deque>

#include <fmt/format.h>
#include <sys/socket.h>

#include "runtime/transport/link_model.hpp"
#include "runtime/transport/transport_detail.hpp"

namespace troupe::net::detail {

namespace {

using clock = std::chrono::steady_clock;
constexpr auto grace = std::chrono::seconds(2);
constexpr std::size_t direct_limit = 64 * 1024; // send() writes frames up to this size itself

/// One TCP connection. On the server side (`accept` set) the receiver thread
/// first runs the handshake; until it succeeds no handler is called.
///
/// Destroying it closes (flushing up to a grace period) and joins its threads,
/// so it must not be destroyed from inside one of its own handlers.
class tcp_connection final : public connection_base {
public:
  tcp_connection(fd_t fd, std::string peer, handlers h, link_model link, std::shared_ptr<const server_options> accept)
      : connection_base(std::move(peer), std::move(h)), fd_(std::move(fd)), pacer_(link), accept_(std::move(accept)),
        authenticated_(!accept_) {
    sender_ = std::thread([this] { send_loop(); });
    receiver_ = std::thread([this] { receive_loop(); });
  }

  ~tcp_connection() override {
    close();
    {
      std::unique_lock lock{mtx_};
      cv_.wait_for(lock, 2 * grace + std::chrono::seconds(1), [&] { return running_ == 0; });
    }
    ::shutdown(fd_.get(), SHUT_RDWR); // unblocks a thread stuck on an unresponsive peer
    sender_.join();
    receiver_.join();
  }

  void send(frame f) override {
    check_sendable(f);
    std::unique_lock lock{mtx_};
    if (closing_ || dead_ || send_error_)
      return; // on_close has told (or will tell) the owner
    queued q;
    q.f = std::move(f);
    q.at = clock::now();
    q.head = encode_header(frame_type::data, q.f.kind, q.f.meta.size(), q.f.blobs);
    if (!queue_.empty() || writing_ || pacer_.active() || bytes_of(q) > direct_limit) {
      queue_.push_back(std::move(q));
      cv_.notify_all();
      return;
    }
    // Small frame, idle socket: write it on this thread, without blocking, and
    // leave what does not fit to the sender (saves a thread hand-off per frame).
    writing_ = true;
    lock.unlock();
    auto err = write_some(fd_.get(), frame_iov(q.head, q.f), q.sent);
    lock.lock();
    writing_ = false;
    if (err)
      send_error_ = fmt::format("sending to {} failed: {}", peer_, error_message(err));
    else if (q.sent < bytes_of(q))
      queue_.push_front(std::move(q));
    cv_.notify_all();
  }

  void close() override {
    std::lock_guard lock{mtx_};
    if (!closing_) {
      closing_ = true;
      close_deadline_ = clock::now() + grace;
    }
    cv_.notify_all();
  }

private:
  struct queued {
    frame f;
    clock::time_point at;
    std::vector<std::byte> head; ///< encode_header of f
    std::size_t sent = 0;        ///< bytes already written by send()
  };

  static std::size_t bytes_of(const queued& q) {
    std::size_t n = q.head.size() + q.f.meta.size();
    for (auto& b : q.f.blobs)
      n += b.defined() ? b.nbytes() : 0;
    return n;
  }

  void send_loop() {
    for (;;) {
      queued q;
      {
        std::unique_lock lock{mtx_};
        cv_.wait(lock, [&] { return dead_ || send_error_ || (!writing_ && (closing_ || !queue_.empty())); });
        if (dead_ || send_error_ || queue_.empty() || (closing_ && clock::now() > close_deadline_))
          break;
        q = std::move(queue_.front());
        queue_.pop_front();
        writing_ = true;
      }
      auto err = write_frame(q);
      std::lock_guard lock{mtx_};
      writing_ = false;
      if (err) {
        send_error_ = fmt::format("sending to {} failed: {}", peer_, error_message(err));
        break;
      }
    }
    // Our end of stream follows the flushed frames; then give the peer a moment
    // to answer with its own before cutting the receiver off.
    ::shutdown(fd_.get(), SHUT_WR);
    {
      std::unique_lock lock{mtx_};
      if (authenticated_)
        cv_.wait_for(lock, grace, [&] { return dead_; });
    }
    ::shutdown(fd_.get(), SHUT_RDWR);
    thread_done();
  }

  caf::error write_frame(queued& q) {
    auto iov = frame_iov(q.head, q.f);
    auto total = bytes_of(q);
    if (!pacer_.active())
      return write_all(fd_.get(), slice_iov(iov, q.sent, total));
    auto start = pacer_.start(total, q.at);
    auto chunk = pacer_.chunk_bytes();
    for (std::size_t off = 0; off < total;) {
      auto end = std::min(total, off + chunk);
      {
        std::unique_lock lock{mtx_};
        if (cv_.wait_until(lock, pacer_.release(start, end), [&] { return dead_; }))
          return make_error(errc::io_failed, "the connection ended");
      }
      if (auto err = write_all(fd_.get(), slice_iov(iov, off, end)))
        return err;
      off = end;
    }
    return {};
  }

  void receive_loop() {
    if (accept_ && !accept_hello(fd_.get(), *accept_, peer_)) {
      end_stream(); // never authenticated: no handler hears of it
      thread_done();
      return;
    }
    {
      std::lock_guard lock{mtx_};
      authenticated_ = true;
    }
    read_result r;
    for (;;) {
      header h;
      frame f;
      r = read_frame(fd_.get(), limits{}, h, f);
      if (r.status == read_status::ok && h.type == frame_type::data) {
        deliver(std::move(f));
        continue;
      }
      if (r.status == read_status::ok)
        r = {read_status::bad, fmt::format("unexpected frame type {} after the handshake", static_cast<int>(h.type))};
      break;
    }
    auto why = why_closed(r);
    end_stream();
    notify_closed(why);
    thread_done();
  }

  std::string why_closed(const read_result& r) {
    std::lock_guard lock{mtx_};
    if (send_error_)
      return *send_error_;
    if (r.status == read_status::bad) {
      if (accept_)
        log_line(*accept_, fmt::format("rejected connection from {}: {}", peer_, r.what));
      return fmt::format("{} sent a malformed frame: {}", peer_, r.what);
    }
    if (closing_)
      return "closed by this side";
    if (r.status == read_status::eof)
      return fmt::format("{} closed the connection", peer_);
    return fmt::format("connection to {} failed: {}", peer_, r.what);
  }

  void end_stream() {
    std::lock_guard lock{mtx_};
    dead_ = true;
    cv_.notify_all();
    ::shutdown(fd_.get(), SHUT_RDWR);
  }

  void thread_done() {
    std::lock_guard lock{mtx_};
    if (--running_ == 0)
      finished_ = true;
    cv_.notify_all();
  }

  fd_t fd_;
  link_pacer pacer_; // used by the sender thread only
  std::shared_ptr<const server_options> accept_;
  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<queued> queue_;
  bool closing_ = false;
  bool writing_ = false; // a thread is writing a frame: others wait (order)
  bool dead_ = false;    // the receiver ended: nothing more goes out either
  bool authenticated_;
  clock::time_point close_deadline_{};
  std::optional<std::string> send_error_; ///< why sending failed
  int running_ = 2;
  std::thread sender_;
  std::thread receiver_;
};

} // namespace

caf::expected<std::unique_ptr<server>> tcp_listen(server_options opts, handlers h) {
  return socket_server_of<tcp_connection>(opts, std::move(h));
}

caf::expected<std::unique_ptr<connection>> tcp_connect(connect_options opts, handlers h) {
  auto fd = connect_socket(opts.host, opts.port, opts.timeout);
  if (!fd)
    return fd.error();
  if (auto welcome = send_hello(fd->get(), opts); !welcome)
    return welcome.error();
  auto peer = fmt::format("{}:{}", opts.host, opts.port);
  return std::unique_ptr<connection>(
    std::make_unique<tcp_connection>(std::move(*fd), std::move(peer), std::move(h), opts.link, nullptr));
}

} // namespace troupe::net::detail
