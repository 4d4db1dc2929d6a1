// The token handshake and the accepting server shared by both transports: a
// connection delivers nothing until its hello carried the right token.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"
#include "runtime/transport/transport_detail.hpp"

namespace troupe::net::detail {

namespace {

constexpr int hello_timeout_ms = 10'000;

std::span<const std::byte> bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string text_of(const std::vector<std::byte>& b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

/// Accepts sockets on its own thread and keeps the connections made from them,
/// destroying each some time after it has finished (its on_close has returned).
class socket_server final : public server {
public:
  socket_server(server_options opts, fd_t listener, std::uint16_t port, accept_factory make)
      : opts_(std::move(opts)), listener_(std::move(listener)), port_(port), make_(std::move(make)),
        wake_(::eventfd(0, EFD_CLOEXEC)) {
    thread_ = std::thread([this] { accept_loop(); });
  }

  ~socket_server() override {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
    thread_.join();
    conns_.clear(); // each closes, flushes and joins its threads
  }

  std::uint16_t port() const override { return port_; }
  std::string address() const override { return opts_.address; }

private:
  void accept_loop() {
    for (;;) {
      pollfd pfd[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      int rc = ::poll(pfd, 2, 1000);
      std::erase_if(conns_, [](auto& c) { return c->finished(); });
      if (rc > 0 && (pfd[1].revents & POLLIN))
        return;
      if (rc <= 0 || !(pfd[0].revents & POLLIN))
        continue;
      fd_t fd{::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC)};
      if (fd.get() < 0)
        continue;
      set_nodelay(fd.get());
      auto peer = peer_name(fd.get());
      conns_.push_back(make_(std::move(fd), std::move(peer)));
    }
  }

  server_options opts_;
  fd_t listener_;
  std::uint16_t port_;
  accept_factory make_;
  fd_t wake_;
  std::vector<std::unique_ptr<connection_base>> conns_; // touched by the accept thread only
  std::thread thread_;
};

} // namespace

void log_line(const server_options& opts, const std::string& line) {
  if (opts.log)
    opts.log(line);
}

bool accept_hello(int fd, const server_options& opts, const std::string& peer, const welcome_fn& welcome) {
  header h;
  frame f;
  auto r = read_frame(fd, limits{max_hello_bytes, 0}, h, f, hello_timeout_ms);
  if (r.status != read_status::ok) {
    log_line(opts, fmt::format("rejected connection from {}: {}", peer, r.what));
    return false;
  }
  if (h.type != frame_type::hello) {
    log_line(opts, fmt::format("rejected connection from {}: expected a hello, got frame type {}", peer,
                               static_cast<int>(h.type)));
    return false;
  }
  auto refuse = [&](const std::string& why) {
    log_line(opts, fmt::format("refused connection from {}: {}", peer, why));
    write_control(fd, frame_type::refusal, 0, bytes_of(why));
    return false;
  };
  if (!tokens_equal(text_of(f.meta), opts.token))
    return refuse("wrong token");
  if (h.kind != static_cast<std::uint16_t>(opts.kind))
    return refuse(fmt::format("this server speaks {}, the client another transport", to_string(opts.kind)));
  std::vector<std::byte> welcome_meta;
  if (welcome)
    if (auto err = welcome(welcome_meta))
      return refuse(error_message(err));
  if (auto err = write_control(fd, frame_type::welcome, 0, welcome_meta)) {
    log_line(opts, fmt::format("rejected connection from {}: {} while answering the hello", peer, error_message(err)));
    return false;
  }
  return true;
}

caf::expected<std::vector<std::byte>> send_hello(int fd, const connect_options& opts) {
  auto where = fmt::format("{}:{}", opts.host, opts.port);
  if (auto err = write_control(fd, frame_type::hello, static_cast<std::uint16_t>(opts.kind), bytes_of(opts.token)))
    return make_error(errc::io_failed, fmt::format("cannot send the hello to {}: {}", where, error_message(err)));
  header h;
  frame f;
  auto r = read_frame(fd, limits{max_hello_bytes, 0}, h, f, static_cast<int>(opts.timeout.count()));
  if (r.status == read_status::eof)
    return make_error(errc::io_failed, fmt::format("{} closed the connection during the handshake", where));
  if (r.status != read_status::ok)
    return make_error(errc::io_failed, fmt::format("handshake with {} failed: {}", where, r.what));
  if (h.type == frame_type::refusal)
    return make_error(errc::io_failed, fmt::format("{} refused the connection: {}", where, text_of(f.meta)));
  if (h.type != frame_type::welcome)
    return make_error(errc::io_failed,
                      fmt::format("{} answered the hello with frame type {}", where, static_cast<int>(h.type)));
  return std::move(f.meta);
}

caf::expected<std::unique_ptr<server>> make_socket_server(const server_options& opts, accept_factory make) {
  auto port = opts.port;
  auto fd = listen_socket(opts.address, port);
  if (!fd)
    return fd.error();
  return std::unique_ptr<server>(new socket_server(opts, std::move(*fd), port, std::move(make)));
}

} // namespace troupe::net::detail
