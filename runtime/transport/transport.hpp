// Moving framed messages and tensor bytes between processes: a listening
// server and connections over TCP or UCX, authenticated by a shared token.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::net {

/// The byte mover under a connection. `ucx` uses shared memory between
/// processes on one machine and TCP across machines; `tcp` is plain sockets.
enum class transport_kind : std::uint8_t { tcp, ucx };

/// "tcp" or "ucx"; "auto" picks ucx when it initialises here, else tcp.
caf::expected<transport_kind> parse_transport(std::string_view name);
std::string_view to_string(transport_kind k) noexcept;

/// An emulated link, enforced on the bytes a connection sends: each frame
/// waits its serialisation time (bytes / bandwidth) behind earlier frames,
/// plus the one-way latency. Zero means unlimited / none.
struct link_model {
  double bytes_per_s = 0;
  double latency_s = 0;
};

/// "10Gbit/s", "1.5GB/s", "200MB/s", "800Kbit/s" (decimal units) -> bytes per second.
caf::expected<double> parse_bandwidth(std::string_view text);
/// "5ms", "200us", "0.25s", "1500ns" -> seconds.
caf::expected<double> parse_duration(std::string_view text);

/// One message on the wire: a tag, small encoded fields, and bulk tensor bytes.
struct frame {
  std::uint16_t kind = 0;           ///< what `meta` encodes (the caller's tag)
  std::vector<std::byte> meta;      ///< encoded fields, at most max_meta_bytes
  std::vector<tensor_handle> blobs; ///< contiguous CPU tensors, sent as raw bytes
};

/// Limits a receiver enforces before allocating anything.
inline constexpr std::size_t max_meta_bytes = 1u << 20;
inline constexpr std::size_t max_blobs = 64;
inline constexpr std::uint64_t max_blob_bytes = 1ull << 36;

/// One bidirectional, authenticated connection. Thread-safe.
///
/// Destroying one closes it (flushing, see close()) and joins its threads, so
/// never destroy a connection, or the server that owns it, from inside one of
/// its own handlers.
class connection {
public:
  virtual ~connection() = default;
  /// Queues `f`; returns at once. The blobs' bytes are read while it is sent,
  /// so the handles are kept alive until then. Frames arrive in order.
  /// After close() or on_close, frames are dropped. Throws
  /// std::invalid_argument for a blob that is not a CPU tensor.
  virtual void send(frame f) = 0;
  /// Sends what is queued (up to a short grace period), then closes.
  virtual void close() = 0;
  /// "127.0.0.1:40112", for messages.
  virtual std::string peer() const = 0;
};

/// What a connection does with what arrives. Called on the connection's
/// receive thread: hand work off quickly.
struct handlers {
  /// A whole frame; its blobs are fresh pooled u8 tensors of the sent sizes
  /// (see tensor_handle::view to read them as what they carry).
  std::function<void(connection&, frame&&)> on_frame;
  /// The connection ended: end of stream, an error, or a protocol violation
  /// (`why` says which, for the user; "closed by this side" after close()).
  /// Called once per authenticated connection, never for refused ones. A
  /// server destroys its connection some time after this returns: drop any
  /// reference to it here.
  std::function<void(connection&, std::string why)> on_close;
};

/// A listening endpoint. Accepts connections whose first frame carries the
/// right token; others are logged through `log` and closed, and so is any
/// connection that sends malformed or oversized frames. Never crashes on input.
class server {
public:
  virtual ~server() = default; ///< stops listening, closes every connection, joins threads
  /// The bound port (useful when 0 was asked for).
  virtual std::uint16_t port() const = 0;
  /// The address it listens on, as given.
  virtual std::string address() const = 0;
};

struct server_options {
  transport_kind kind = transport_kind::tcp;
  std::string address = "127.0.0.1";    ///< listen only here
  std::uint16_t port = 0;               ///< 0 = any free port
  std::string token;                    ///< shared secret every connection must present
  std::function<void(std::string)> log; ///< refused and rejected connections, one line each
  link_model link;                      ///< applied to what this side sends on every accepted connection
};

caf::expected<std::unique_ptr<server>> listen(server_options opts, handlers h);

struct connect_options {
  transport_kind kind = transport_kind::tcp;
  std::string host;
  std::uint16_t port = 0;
  std::string token;
  link_model link; ///< applied to what this side sends
  std::chrono::milliseconds timeout{10'000};
};

/// Connects and authenticates; an error says where it tried and why it failed.
caf::expected<std::unique_ptr<connection>> connect(connect_options opts, handlers h);

} // namespace troupe::net
