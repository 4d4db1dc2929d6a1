// Little-endian encoding of message fields for the wire: a writer that appends
// and a reader that checks every length against what is left (never trusts input).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace troupe {

/// Thrown by byte_reader on truncated or malformed input; callers turn it
/// into a rejected message, never a crash.
struct malformed_input : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Appends fixed-width numbers and length-prefixed strings to a byte vector.
class byte_writer {
public:
  explicit byte_writer(std::vector<std::byte>& out) : out_(out) {}

  template <class T>
    requires std::is_arithmetic_v<T> || std::is_enum_v<T>
  void put(T v) {
    auto at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));  // x86-64 and aarch64 are little-endian
  }
  void put(const std::string& s) {
    put(static_cast<std::uint32_t>(s.size()));
    auto at = out_.size();
    out_.resize(at + s.size());
    std::memcpy(out_.data() + at, s.data(), s.size());
  }
  template <class T>
  void put(const std::vector<T>& v) {
    put(static_cast<std::uint32_t>(v.size()));
    for (const auto& x : v)
      put(x);
  }

private:
  std::vector<std::byte>& out_;
};

/// Reads what byte_writer wrote; throws malformed_input past the end or on
/// a length larger than the bytes left.
class byte_reader {
public:
  byte_reader(const std::byte* data, std::size_t size) : p_(data), left_(size) {}
  explicit byte_reader(const std::vector<std::byte>& v) : byte_reader(v.data(), v.size()) {}

  template <class T>
    requires std::is_arithmetic_v<T> || std::is_enum_v<T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    advance(sizeof(T));
    return v;
  }
  std::string get_string() {
    auto n = get<std::uint32_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    advance(n);
    return s;
  }
  /// A count of following items, each at least `min_item_bytes` long (so a
  /// forged count cannot make the caller reserve more than the input holds).
  std::uint32_t get_count(std::size_t min_item_bytes) {
    auto n = get<std::uint32_t>();
    if (min_item_bytes > 0 && n > left_ / min_item_bytes)
      throw malformed_input("a count larger than the message");
    return n;
  }
  std::size_t left() const noexcept { return left_; }
  /// Throws unless every byte was read.
  void expect_end() const {
    if (left_ != 0)
      throw malformed_input(std::to_string(left_) + " unexpected trailing bytes");
  }

private:
  void need(std::size_t n) const {
    if (n > left_)
      throw malformed_input("truncated message");
  }
  void advance(std::size_t n) {
    p_ += n;
    left_ -= n;
  }
  const std::byte* p_;
  std::size_t left_;
};

} // namespace troupe
