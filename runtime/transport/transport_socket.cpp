// Blocking socket helpers and the frame encoding shared by both transports:
// every size read from the wire is checked before anything is allocated for it.
#include <bit>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/actor/errors.hpp"
#include "runtime/transport/transport_detail.hpp"

namespace troupe::net::detail {

static_assert(std::endian::native == std::endian::little, "the wire format is written as little-endian");

namespace {

template <class T>
void put(std::byte*& p, T v) {
  std::memcpy(p, &v, sizeof v);
  p += sizeof v;
}

template <class T>
T get(const std::byte*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

std::string errno_text(int e) {
  return std::strerror(e);
}

struct addrinfo_ptr {
  addrinfo* p = nullptr;
  addrinfo_ptr() = default;
  addrinfo_ptr(addrinfo_ptr&& o) noexcept : p(std::exchange(o.p, nullptr)) {}
  addrinfo_ptr& operator=(addrinfo_ptr&&) = delete;
  ~addrinfo_ptr() {
    if (p)
      freeaddrinfo(p);
  }
};

caf::expected<addrinfo_ptr> resolve(const std::string& host, std::uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo_ptr res;
  auto service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res.p); rc != 0)
    return make_error(errc::io_failed, fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc)));
  return res;
}

} // namespace

std::vector<std::byte> encode_header(frame_type t, std::uint16_t kind, std::size_t meta_bytes,
                                     std::span<const tensor_handle> blobs) {
  std::vector<std::byte> out(header_bytes + 8 * blobs.size());
  auto* p = out.data();
  put(p, wire_magic);
  put(p, wire_version);
  put(p, static_cast<std::uint8_t>(t));
  put(p, kind);
  put(p, static_cast<std::uint32_t>(meta_bytes));
  put(p, static_cast<std::uint32_t>(blobs.size()));
  for (auto& b : blobs)
    put(p, static_cast<std::uint64_t>(b.defined() ? b.nbytes() : 0));
  return out;
}

bool decode_header(const std::byte* p, const limits& lim, header& out, std::string& error) {
  auto magic = get<std::uint32_t>(p);
  auto version = get<std::uint8_t>(p);
  auto type = get<std::uint8_t>(p);
  out.kind = get<std::uint16_t>(p);
  out.meta_bytes = get<std::uint32_t>(p);
  out.blob_count = get<std::uint32_t>(p);
  if (magic != wire_magic)
    error = fmt::format("not a troupe frame (magic {:#010x}, expected {:#010x})", magic, wire_magic);
  else if (version != wire_version)
    error = fmt::format("protocol version {} (this side speaks {})", version, wire_version);
  else if (type > static_cast<std::uint8_t>(frame_type::bye))
    error = fmt::format("unknown frame type {}", type);
  else if (out.meta_bytes > lim.meta)
    error = fmt::format("meta of {} bytes exceeds the limit of {}", out.meta_bytes, lim.meta);
  else if (out.blob_count > lim.blobs)
    error = fmt::format("{} blobs exceed the limit of {}", out.blob_count, lim.blobs);
  out.type = static_cast<frame_type>(type);
  return error.empty();
}

bool check_blob_size(std::uint64_t n, std::size_t index, std::string& error) {
  if (n <= max_blob_bytes)
    return true;
  error = fmt::format("blob {} of {} bytes exceeds the limit of {}", index, n, max_blob_bytes);
  return false;
}

bool tokens_equal(std::string_view a, std::string_view b) noexcept {
  // Walk the longer one fully so the time does not depend on where they differ.
  auto n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    auto x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
    auto y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0u;
    diff |= x ^ y;
  }
  return diff == 0;
}

fd_t& fd_t::operator=(fd_t&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

fd_t::~fd_t() {
  if (fd_ >= 0)
    ::close(fd_);
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

caf::expected<fd_t> listen_socket(const std::string& host, std::uint16_t& port) {
  auto res = resolve(host, port, true);
  if (!res)
    return res.error();
  std::string last = "no address";
  for (auto* ai = res->p; ai; ai = ai->ai_next) {
    fd_t fd{::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol)};
    if (fd.get() < 0) {
      last = errno_text(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), 128) != 0) {
      last = errno_text(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(ss).sin6_port
                                          : reinterpret_cast<sockaddr_in&>(ss).sin_port);
    return fd;
  }
  return make_error(errc::io_failed, fmt::format("cannot listen on {}:{}: {}", host, port, last));
}

caf::expected<fd_t> connect_socket(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout) {
  auto res = resolve(host, port, false);
  if (!res)
    return res.error();
  std::string last = "no address";
  for (auto* ai = res->p; ai; ai = ai->ai_next) {
    fd_t fd{::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol)};
    if (fd.get() < 0) {
      last = errno_text(errno);
      continue;
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last = errno_text(errno);
        continue;
      }
      pollfd pfd{fd.get(), POLLOUT, 0};
      if (::poll(&pfd, 1, static_cast<int>(timeout.count())) == 0) {
        last = fmt::format("no answer within {} ms", timeout.count());
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = errno_text(err);
        continue;
      }
    }
    // Back to blocking: each connection has its own threads.
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    set_nodelay(fd.get());
    return fd;
  }
  return make_error(errc::io_failed, fmt::format("cannot connect to {}:{}: {}", host, port, last));
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    return "unknown peer";
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "unknown peer";
  return ss.ss_family == AF_INET6 ? fmt::format("[{}]:{}", host, serv) : fmt::format("{}:{}", host, serv);
}

} // namespace troupe::net::detail
