// Internals shared by the TCP and UCX transports: the wire header, blocking
// socket helpers, the token handshake and the accepting server. Not a public API.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <sys/uio.h>

#include "runtime/actor/errors.hpp"
#include "runtime/transport/transport.hpp"

namespace troupe::net::detail {

// ---- wire format -------------------------------------------------------------
// A frame is a 16-byte header (magic "TRPF", version, type, kind, meta length,
// blob count), the blob sizes (u64 each), the meta bytes, then the blob bytes.
// All integers little-endian.

inline constexpr std::uint32_t wire_magic = 0x46505254; // "TRPF" read as little-endian
inline constexpr std::uint8_t wire_version = 1;
inline constexpr std::size_t header_bytes = 16;
/// The most a peer may send before it has authenticated (hello or welcome meta).
inline constexpr std::size_t max_hello_bytes = 64 * 1024;

/// What a frame is for: user data, or one of the handshake and shutdown messages.
enum class frame_type : std::uint8_t { data = 0, hello = 1, welcome = 2, refusal = 3, address = 4, bye = 5 };

struct header {
  frame_type type = frame_type::data;
  std::uint16_t kind = 0;
  std::uint32_t meta_bytes = 0;
  std::uint32_t blob_count = 0;
};

/// Limits a reader applies; the defaults are the public ones.
struct limits {
  std::size_t meta = max_meta_bytes;
  std::size_t blobs = max_blobs;
};

/// The header and blob sizes of a frame, ready to send before its meta.
std::vector<std::byte> encode_header(frame_type t, std::uint16_t kind, std::size_t meta_bytes,
                                     std::span<const tensor_handle> blobs);
/// Parses and checks a fixed header; the error text says what is wrong.
bool decode_header(const std::byte* p, const limits& lim, header& out, std::string& error);
/// Checks one blob size against max_blob_bytes.
bool check_blob_size(std::uint64_t n, std::size_t index, std::string& error);

/// Compares two secrets in time that depends only on their lengths.
bool tokens_equal(std::string_view a, std::string_view b) noexcept;

// ---- sockets -----------------------------------------------------------------

/// An owned file descriptor.
class fd_t {
public:
  fd_t() = default;
  explicit fd_t(int fd) noexcept : fd_(fd) {}
  fd_t(fd_t&& o) noexcept : fd_(o.release()) {}
  fd_t& operator=(fd_t&& o) noexcept;
  ~fd_t();
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }

private:
  int fd_ = -1;
};

/// A listening TCP socket bound to `host:port` only; `port` is updated to the bound one.
caf::expected<fd_t> listen_socket(const std::string& host, std::uint16_t& port);
/// Connects with TCP_NODELAY set, giving up after `timeout`.
caf::expected<fd_t> connect_socket(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout);
/// Sets TCP_NODELAY.
void set_nodelay(int fd);
/// "127.0.0.1:40112" (IPv6 in brackets).
std::string peer_name(int fd);

/// How a blocking read ended: a whole frame, end of stream between frames, a
/// malformed or truncated frame (the peer's fault), or a socket error.
enum class read_status { ok, eof, bad, failed };
struct read_result {
  read_status status = read_status::ok;
  std::string what; ///< unless ok: what happened, for a user
};

/// Reads exactly `n` bytes. A deadline (ms since now, -1 = none) bounds the wait.
/// eof means end of stream before any byte; a partial read is `bad`.
read_result read_exact(int fd, void* p, std::size_t n, int timeout_ms, const char* what);
/// Reads one whole frame: header, sizes, meta and blobs (into fresh pooled u8 tensors).
read_result read_frame(int fd, const limits& lim, header& h, frame& f, int timeout_ms = -1);
/// Writes every byte of `iov` (MSG_NOSIGNAL); an io_failed error says why not.
caf::error write_all(int fd, std::span<const iovec> iov);
/// Writes what the socket takes now without blocking, from byte `sent` on;
/// advances `sent`. A full socket is no error.
caf::error write_some(int fd, std::span<const iovec> iov, std::size_t& sent);
/// Writes a small control frame (no blobs).
caf::error write_control(int fd, frame_type t, std::uint16_t kind, std::span<const std::byte> meta);
/// The iovecs of a data frame: `head` (from encode_header), meta, then non-empty blobs.
std::vector<iovec> frame_iov(const std::vector<std::byte>& head, const frame& f);
/// Bytes [begin, end) of the concatenation of `iov`.
std::vector<iovec> slice_iov(std::span<const iovec> iov, std::size_t begin, std::size_t end);
/// Throws std::invalid_argument unless every blob is a CPU tensor (or undefined).
void check_sendable(const frame& f);

// ---- handshake ---------------------------------------------------------------

/// Fills the welcome's meta once the token has been accepted, or says why it cannot.
using welcome_fn = std::function<caf::error(std::vector<std::byte>& meta)>;
/// Server side: reads the hello, checks token and transport, answers welcome
/// (its meta from `welcome`, when given) or refusal. Logs through `log` and
/// returns false on failure.
bool accept_hello(int fd, const server_options& opts, const std::string& peer, const welcome_fn& welcome = {});
/// Client side: sends the hello and returns the welcome's meta, or why it was refused.
caf::expected<std::vector<std::byte>> send_hello(int fd, const connect_options& opts);
/// "rejected connection from HOST:PORT: <what>" through `log` when there is one.
void log_line(const server_options& opts, const std::string& line);

// ---- connections and the accepting server ------------------------------------

/// What every connection implementation shares: the peer's name, the handlers
/// and the once-only close notification.
class connection_base : public connection {
public:
  connection_base(std::string peer, handlers h) : peer_(std::move(peer)), h_(std::move(h)) {}
  std::string peer() const override { return peer_; }
  /// True once its threads have ended; the server then destroys it.
  bool finished() const noexcept { return finished_.load(); }

protected:
  void deliver(frame&& f) {
    if (h_.on_frame)
      h_.on_frame(*this, std::move(f));
  }
  /// Calls on_close the first time only.
  void notify_closed(const std::string& why) {
    if (!closed_.exchange(true) && h_.on_close)
      h_.on_close(*this, why);
  }
  std::string peer_;
  handlers h_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> finished_{false};
};

/// Builds the connection for an accepted socket; its thread runs accept_hello first.
using accept_factory = std::function<std::unique_ptr<connection_base>(fd_t, std::string peer)>;

/// Listens on a TCP socket and hands each accepted socket to `make`.
caf::expected<std::unique_ptr<server>> make_socket_server(const server_options& opts, accept_factory make);

/// A socket server whose accepted sockets become `Connection`s (tcp or ucx),
/// constructed as `Connection(fd, peer, handlers, link, options)`.
template <class Connection>
caf::expected<std::unique_ptr<server>> socket_server_of(const server_options& opts, handlers h) {
  auto shared = std::make_shared<const server_options>(opts);
  return make_socket_server(opts, [shared, h](fd_t fd, std::string peer) -> std::unique_ptr<connection_base> {
    return std::make_unique<Connection>(std::move(fd), std::move(peer), h, shared->link, shared);
  });
}

// ---- transports ----------------------------------------------------------------

caf::expected<std::unique_ptr<server>> tcp_listen(server_options opts, handlers h);
caf::expected<std::unique_ptr<connection>> tcp_connect(connect_options opts, handlers h);
caf::expected<std::unique_ptr<server>> ucx_listen(server_options opts, handlers h);
caf::expected<std::unique_ptr<connection>> ucx_connect(connect_options opts, handlers h);
/// Why UCX cannot initialise in this process; nullopt when it can.
std::optional<std::string> ucx_unavailable_reason();

} // namespace troupe::net::detail
