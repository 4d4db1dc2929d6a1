// Test support for codecs derived from inspect() (runtime/transport/wire.hpp):
// a sample of any inspectable type with every field set, and every truncated,
// garbled or re-blobbed copy of a good frame, for a protocol's fuzz test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "runtime/transport/wire.hpp"

namespace troupe::testing {

/// Sets every field of a value (an inspector that writes state) to something
/// a reader accepts: numbers and enums 1, flags true, strings "ab", two
/// elements per list, f32 [2, 3] tensors.
class filler {
public:
  using result_type = void;
  static constexpr bool reads_state = false;
  static constexpr bool writes_state = true;

  template <class... Ts>
  void operator()(Ts&&... xs) {
    (set(xs), ...);
  }

private:
  template <class T>
  void set(T& x) {
    using V = std::remove_const_t<T>;
    if constexpr (caf::meta::is_annotation<V>::value || wire::detail::is_atom<V>)
      return;
    else if constexpr (std::is_same_v<V, bool>)
      x = true;
    else if constexpr (std::is_enum_v<V>)
      x = static_cast<V>(1);
    else if constexpr (std::is_arithmetic_v<V>)
      x = static_cast<V>(1);
    else if constexpr (std::is_same_v<V, std::string>)
      x = "ab";
    else if constexpr (std::is_same_v<V, tensor_handle>) {
      x = tensor_handle::empty({2, 3});
      for (int i = 0; i < 6; ++i)
        x.template data<float>()[i] = static_cast<float>(i) + 0.5f;
    } else if constexpr (wire::detail::is_vector<V>) {
      x.resize(2);
      for (auto& e : x)
        set(e);
    } else if constexpr (wire::detail::is_tuple<V>)
      std::apply([this](auto&... ys) { (set(ys), ...); }, x);
    else
      inspect(*this, x);
  }
};

/// A T with every field set (filler).
template <class T>
T sample() {
  T x{};
  filler f;
  f(x);
  return x;
}

/// A copy of a good frame, damaged in one way.
struct damaged_frame {
  net::frame f;
  std::string how;
  bool must_fail; ///< false: a garbled byte may still read as a valid value
};

/// Every cut of `good`'s meta, each byte of it garbled four ways, a trailing
/// byte, and each blob dropped, doubled and grown by a byte.
inline std::vector<damaged_frame> damage(const net::frame& good) {
  std::vector<damaged_frame> out;
  for (std::size_t n = 0; n < good.meta.size(); ++n) {
    auto f = good;
    f.meta.resize(n);
    out.push_back({std::move(f), fmt::format("meta cut to {} bytes", n), true});
  }
  for (std::size_t i = 0; i < good.meta.size(); ++i)
    for (auto g : {0x00, 0xff, 0x80, 0x01}) {
      auto f = good;
      auto b = std::to_integer<std::uint8_t>(f.meta[i]);
      f.meta[i] = std::byte{static_cast<std::uint8_t>(g == 0x01 ? b + 1 : g == 0x80 ? b ^ 0x80 : g)};
      out.push_back({std::move(f), fmt::format("byte {} garbled ({:#x})", i, g), false});
    }
  auto longer = good;
  longer.meta.push_back(std::byte{0});
  out.push_back({std::move(longer), "a trailing byte", true});
  for (std::size_t i = 0; i < good.blobs.size(); ++i) {
    auto dropped = good;
    dropped.blobs.erase(dropped.blobs.begin() + static_cast<std::ptrdiff_t>(i));
    out.push_back({std::move(dropped), fmt::format("blob {} dropped", i), true});
    auto doubled = good;
    doubled.blobs.push_back(good.blobs[i]);
    out.push_back({std::move(doubled), fmt::format("blob {} sent twice", i), true});
    auto grown = good;
    grown.blobs[i] = tensor_handle::zeros({static_cast<std::int64_t>(good.blobs[i].nbytes()) + 1}, dtype::u8);
    out.push_back({std::move(grown), fmt::format("blob {} one byte longer", i), true});
  }
  return out;
}

/// The bytes of a frame (meta, then each blob), to compare two frames.
inline std::vector<std::byte> bytes_of(const net::frame& f) {
  auto out = f.meta;
  for (const auto& b : f.blobs) {
    auto p = static_cast<const std::byte*>(b.raw());
    out.insert(out.end(), p, p + b.nbytes());
  }
  return out;
}

} // namespace troupe::testing
