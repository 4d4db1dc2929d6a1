// Names and parsing for devices and dtypes.
#include "runtime/tensor/device.hpp"

#include <charconv>

#include "runtime/tensor/dtype.hpp"

namespace troupe {

std::string to_string(device d) {
  return d.is_cpu() ? std::string{"cpu"} : "cuda:" + std::to_string(d.index);
}

std::optional<device> parse_device(std::string_view s) noexcept {
  if (s == "cpu")
    return device::cpu();
  if (s == "cuda")
    return device::cuda(0);
  constexpr std::string_view prefix = "cuda:";
  if (!s.starts_with(prefix))
    return std::nullopt;
  s.remove_prefix(prefix.size());
  int i = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), i);
  if (ec != std::errc{} || end != s.data() + s.size() || i < 0)
    return std::nullopt;
  return device::cuda(i);
}

std::optional<dtype> parse_dtype(std::string_view s) noexcept {
  for (auto t : {dtype::f32, dtype::bf16, dtype::f16, dtype::i32, dtype::u8})
    if (to_string(t) == s)
      return t;
  return std::nullopt;
}

} // namespace troupe
