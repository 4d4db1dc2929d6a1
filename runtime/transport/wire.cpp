// The parts of the wire form that are not templates: tensors, strings, flags,
// and an error's what and where (runtime/transport/wire.hpp).
#include "runtime/transport/wire.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"

namespace troupe::wire {

namespace {

/// The largest dimension a reader takes (a forged one must not overflow numel).
constexpr std::int64_t max_dim = std::int64_t{1} << 40;

} // namespace

void detail::frame_out::header(const tensor_handle& t) {
  std::uint8_t head[3] = {1, static_cast<std::uint8_t>(t.type()), static_cast<std::uint8_t>(t.rank())};
  bytes(head, sizeof head);
  bytes(t.shape().begin(), 8 * static_cast<std::size_t>(t.rank()));
}

void detail::frame_out::tensor(const tensor_handle& device_or_host, const device_fence* ready) {
  if (!device_or_host.defined()) {
    *at++ = std::byte{0};
    return;
  }
  // The sockets read host memory; the receiver uploads it where it needs it.
  auto t = copy_to_host(device_or_host, ready);
  header(t);
  f.blobs.push_back(std::move(t));
}

void detail::frame_out::list(const void* p, std::size_t n, dtype type) {
  auto t = tensor_handle::empty({static_cast<std::int64_t>(n)}, type);
  if (n != 0) // an empty list has no pointer to copy from
    std::memcpy(t.raw(), p, t.nbytes());
  header(t);
  f.blobs.push_back(std::move(t));
}

bool reader::get_flag(bool& x) {
  std::uint8_t v = 0;
  if (!take(&v, 1))
    return false;
  if (v > 1)
    return fail(fmt::format("a flag of {} (expected 0 or 1)", v));
  x = v == 1;
  return true;
}

bool reader::get_string(std::string& s) {
  std::uint32_t n = 0;
  if (!take(&n, sizeof n))
    return false;
  if (n > left_)
    return fail("truncated message");
  s.assign(reinterpret_cast<const char*>(p_), n);
  p_ += n, left_ -= n;
  return true;
}

bool reader::get_tensor(tensor_handle& t) {
  std::uint8_t defined = 0, type = 0, rank = 0;
  if (!take(&defined, 1))
    return false;
  if (defined == 0) {
    t = {};
    return true;
  }
  if (!take(&type, 1) || !take(&rank, 1))
    return false;
  if (type > static_cast<std::uint8_t>(dtype::u8))
    return fail(fmt::format("unknown dtype {}", type));
  if (rank > shape_t::max_rank)
    return fail(fmt::format("tensor rank {} (at most {})", rank, shape_t::max_rank));
  std::int64_t dims[shape_t::max_rank]{};
  for (std::uint8_t i = 0; i < rank; ++i) {
    if (!take(&dims[i], sizeof dims[i]))
      return false;
    if (dims[i] < 0 || dims[i] > max_dim)
      return fail(fmt::format("tensor dimension {}", dims[i]));
  }
  if (next_blob_ >= f_.blobs.size())
    return fail("fewer tensor payloads than tensors");
  const auto& blob = f_.blobs[next_blob_++];
  // Multiplied here, not by shape_t::numel(): six forged dimensions overflow an int64.
  // Saturated at 2^64 (a dimension is at most 2^40, so each product fits).
  unsigned __int128 need = size_of(static_cast<dtype>(type));
  for (std::uint8_t i = 0; i < rank; ++i)
    need = std::min(need * static_cast<std::uint64_t>(dims[i]), static_cast<unsigned __int128>(1) << 64);
  if (need != blob.nbytes())
    return fail(fmt::format("tensor of {} bytes in a payload of {}", static_cast<std::uint64_t>(need), blob.nbytes()));
  t = blob.view(shape_t{std::span<const std::int64_t>(dims, rank)}, static_cast<dtype>(type));
  return true;
}

bool reader::get_list_tensor(tensor_handle& t, dtype want) {
  if (!get_tensor(t))
    return false;
  if (!t.defined() || t.type() != want || t.rank() != 1)
    return fail(fmt::format("a list of {} sent as {}", to_string(want),
                            t.defined() ? fmt::format("{} {}", to_string(t.type()), to_string(t.shape()))
                                        : std::string{"no tensor"}));
  return true;
}

bool reader::check(const caf::error& e) {
  return !e || fail(error_message(e));
}

bool reader::fail(std::string what) {
  what_ = std::move(what);
  std::string path;
  for (std::size_t i = 0; i < std::min(depth_, path_.size()); ++i) {
    const auto& p = path_[i];
    path += path.empty() ? "" : " > ";
    path += p.type;
    if (p.index != no_index)
      path += fmt::format("[{}]", p.index);
  }
  auto at = f_.meta.size() - left_;
  where_ = path.empty() ? fmt::format("at byte {}", at) : fmt::format("in {}, at byte {}", path, at);
  return false;
}

bool reader::finish() {
  if (!what_.empty())
    return false;
  if (left_ != 0)
    return fail(fmt::format("{} unexpected trailing bytes", left_));
  if (next_blob_ != f_.blobs.size())
    return fail(fmt::format("{} tensor payloads for {} tensors", f_.blobs.size(), next_blob_));
  return true;
}

caf::error reader::error() const {
  return make_error(errc::malformed_frame, fmt::format("{} ({})", what_, where_));
}

caf::error wrong_kind(std::uint16_t want, std::uint16_t got) {
  return make_error(errc::malformed_frame, fmt::format("expected frame kind {}, got {}", want, got));
}

} // namespace troupe::wire
