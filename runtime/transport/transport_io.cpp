// Reading and writing whole frames on a blocking socket: blobs are received
// straight into pooled tensors and sent straight from them (no staging copies).
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include "runtime/transport/transport_detail.hpp"

namespace troupe::net::detail {

namespace {

/// A clean end of stream is only clean between frames.
read_result mid_frame(read_result r) {
  if (r.status == read_status::eof)
    r.status = read_status::bad;
  return r;
}

} // namespace

read_result read_exact(int fd, void* p, std::size_t n, int timeout_ms, const char* what) {
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + std::chrono::milliseconds(timeout_ms);
  auto* out = static_cast<char*>(p);
  std::size_t got = 0;
  while (got < n) {
    if (timeout_ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      pollfd pfd{fd, POLLIN, 0};
      int rc = left > 0 ? ::poll(&pfd, 1, static_cast<int>(left)) : 0;
      if (rc < 0 && errno == EINTR)
        continue;
      if (rc == 0)
        return {read_status::bad, fmt::format("no {} within {} ms", what, timeout_ms)};
    }
    auto r = ::recv(fd, out + got, n - got, timeout_ms >= 0 ? 0 : MSG_WAITALL);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
    } else if (r == 0) {
      if (got == 0)
        return {read_status::eof, fmt::format("end of stream before the {}", what)};
      return {read_status::bad,
              fmt::format("truncated frame: end of stream after {} of {} bytes of the {}", got, n, what)};
    } else if (errno != EINTR) {
      return {read_status::failed, fmt::format("{} while reading the {}", std::strerror(errno), what)};
    }
  }
  return {};
}

read_result read_frame(int fd, const limits& lim, header& h, frame& f, int timeout_ms) {
  std::byte head[header_bytes];
  if (auto r = read_exact(fd, head, header_bytes, timeout_ms, "frame header"); r.status != read_status::ok)
    return r;
  std::string error;
  if (!decode_header(head, lim, h, error))
    return {read_status::bad, error};
  std::vector<std::uint64_t> sizes(h.blob_count); // at most lim.blobs, checked above
  if (auto r = read_exact(fd, sizes.data(), sizes.size() * 8, timeout_ms, "blob sizes"); r.status != read_status::ok)
    return mid_frame(r);
  for (std::size_t i = 0; i < sizes.size(); ++i)
    if (!check_blob_size(sizes[i], i, error))
      return {read_status::bad, error};
  f.kind = h.kind;
  f.meta.resize(h.meta_bytes);
  if (auto r = read_exact(fd, f.meta.data(), f.meta.size(), timeout_ms, "meta"); r.status != read_status::ok)
    return mid_frame(r);
  f.blobs.clear();
  f.blobs.reserve(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    tensor_handle t; // allocated only now, after its size passed the limit
    try {
      t = tensor_handle::empty({static_cast<std::int64_t>(sizes[i])}, dtype::u8);
    } catch (const std::bad_alloc&) {
      return {read_status::bad, fmt::format("cannot allocate {} bytes for blob {}", sizes[i], i)};
    }
    if (auto r = read_exact(fd, t.raw(), sizes[i], timeout_ms, "blob"); r.status != read_status::ok)
      return mid_frame(r);
    f.blobs.push_back(std::move(t));
  }
  return {};
}

caf::error write_all(int fd, std::span<const iovec> iov) {
  std::vector<iovec> left(iov.begin(), iov.end());
  std::size_t first = 0;
  while (first < left.size()) {
    msghdr msg{};
    msg.msg_iov = left.data() + first;
    msg.msg_iovlen = left.size() - first;
    auto n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return make_error(errc::io_failed, std::strerror(errno));
    }
    auto sent = static_cast<std::size_t>(n);
    while (first < left.size() && sent >= left[first].iov_len)
      sent -= left[first++].iov_len;
    if (first < left.size()) {
      left[first].iov_base = static_cast<char*>(left[first].iov_base) + sent;
      left[first].iov_len -= sent;
    }
  }
  return {};
}

caf::error write_some(int fd, std::span<const iovec> iov, std::size_t& sent) {
  std::size_t total = 0;
  for (auto& v : iov)
    total += v.iov_len;
  while (sent < total) {
    auto left = slice_iov(iov, sent, total);
    msghdr msg{};
    msg.msg_iov = left.data();
    msg.msg_iovlen = left.size();
    auto n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return {}; // full: the rest goes later
    if (n < 0)
      return make_error(errc::io_failed, std::strerror(errno));
    sent += static_cast<std::size_t>(n);
  }
  return {};
}

caf::error write_control(int fd, frame_type t, std::uint16_t kind, std::span<const std::byte> meta) {
  auto head = encode_header(t, kind, meta.size(), {});
  iovec iov[2] = {{head.data(), head.size()}, {const_cast<std::byte*>(meta.data()), meta.size()}};
  return write_all(fd, iov);
}

std::vector<iovec> frame_iov(const std::vector<std::byte>& head, const frame& f) {
  std::vector<iovec> iov;
  iov.reserve(2 + f.blobs.size());
  iov.push_back({const_cast<std::byte*>(head.data()), head.size()});
  if (!f.meta.empty())
    iov.push_back({const_cast<std::byte*>(f.meta.data()), f.meta.size()});
  for (auto& b : f.blobs)
    if (b.defined() && b.nbytes() > 0)
      iov.push_back({b.raw(), b.nbytes()});
  return iov;
}

std::vector<iovec> slice_iov(std::span<const iovec> iov, std::size_t begin, std::size_t end) {
  std::vector<iovec> out;
  std::size_t pos = 0;
  for (auto& v : iov) {
    auto lo = std::max(begin, pos);
    auto hi = std::min(end, pos + v.iov_len);
    if (lo < hi)
      out.push_back({static_cast<char*>(v.iov_base) + (lo - pos), hi - lo});
    pos += v.iov_len;
  }
  return out;
}

void check_sendable(const frame& f) {
  for (std::size_t i = 0; i < f.blobs.size(); ++i)
    if (f.blobs[i].defined() && !f.blobs[i].device().is_cpu())
      throw std::invalid_argument(fmt::format("connection::send: blob {} is on {}; only CPU tensors are sent", i,
                                              to_string(f.blobs[i].device())));
}

} // namespace troupe::net::detail
