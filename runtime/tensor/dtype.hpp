// Element types a tensor can hold, with their sizes and names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace troupe {

/// Element type of a tensor.
enum class dtype : std::uint8_t { f32, bf16, f16, i32, u8 };

/// Bytes per element of `t`.
constexpr std::size_t size_of(dtype t) noexcept {
  switch (t) {
  case dtype::f32:
    return 4;
  case dtype::bf16:
    return 2;
  case dtype::f16:
    return 2;
  case dtype::i32:
    return 4;
  case dtype::u8:
    return 1;
  }
  return 0;
}

/// The name used in graph files and traces (`f32`, `bf16`, ...).
constexpr std::string_view to_string(dtype t) noexcept {
  switch (t) {
  case dtype::f32:
    return "f32";
  case dtype::bf16:
    return "bf16";
  case dtype::f16:
    return "f16";
  case dtype::i32:
    return "i32";
  case dtype::u8:
    return "u8";
  }
  return "?";
}

/// Parses a dtype name; empty when `s` names none.
std::optional<dtype> parse_dtype(std::string_view s) noexcept;

} // namespace troupe
