// Where a tensor's bytes live: the CPU or one CUDA device.
#pragma once

#include <compare>
#include <optional>
#include <string>
#include <string_view>

namespace troupe {

/// A compute device: `cpu` or `cuda:N`.
struct device {
  enum class kind_t : unsigned char { cpu, cuda };
  kind_t kind = kind_t::cpu;
  int index = 0;

  static constexpr device cpu() noexcept { return {}; }
  static constexpr device cuda(int i) noexcept { return {kind_t::cuda, i}; }
  constexpr bool is_cpu() const noexcept { return kind == kind_t::cpu; }
  constexpr bool is_cuda() const noexcept { return kind == kind_t::cuda; }
  friend constexpr auto operator<=>(const device&, const device&) = default;
};

/// `cpu` or `cuda:N`.
std::string to_string(device d);

/// Parses `cpu`, `cuda` (meaning `cuda:0`) or `cuda:N`; empty on anything else.
std::optional<device> parse_device(std::string_view s) noexcept;

} // namespace troupe
