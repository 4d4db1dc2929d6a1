// Quantized outer exchanges: encode per row, decode and reduce in f32 (#13).
#include "schedulers/sync/quantize.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "schedulers/sync/sparseloco.hpp"

namespace troupe::sched {

namespace {

constexpr float int8_max = 127.0f, fp8_max = 448.0f;

/// The 127 finite non-negative e4m3 values by code (0x00 .. 0x7e), increasing.
const std::array<float, 127>& fp8_table() {
  static const auto table = [] {
    std::array<float, 127> t{};
    for (int c = 0; c < 127; ++c) {
      int e = (c >> 3) & 0xf, m = c & 7;
      t[static_cast<std::size_t>(c)] =
        e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
    }
    return t;
  }();
  return table;
}

std::size_t bytes_per_value(wire_format f) {
  switch (f) {
  case wire_format::f32:
    return 4;
  case wire_format::bf16:
    return 2;
  case wire_format::int8:
  case wire_format::fp8:
    return 1;
  case wire_format::sparse2:
    break; // not per value: schedulers/sync/sparseloco.cpp
  }
  return 4;
}

float decode(const quantized_rows& q, std::int64_t i, float scale) {
  const std::uint8_t* p = q.data.data() + static_cast<std::size_t>(i) * bytes_per_value(q.format);
  switch (q.format) {
  case wire_format::f32: {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case wire_format::bf16: {
    std::uint16_t b;
    std::memcpy(&b, p, 2);
    return from_bf16(b);
  }
  case wire_format::int8:
    return static_cast<float>(static_cast<std::int8_t>(*p)) / scale;
  case wire_format::fp8:
    return from_fp8_e4m3(*p) / scale;
  case wire_format::sparse2:
    break;
  }
  return 0;
}

} // namespace

std::optional<wire_format> parse_wire_format(std::string_view name) {
  if (name == "none")
    return wire_format::f32;
  if (name == "bf16")
    return wire_format::bf16;
  if (name == "int8")
    return wire_format::int8;
  if (name == "fp8")
    return wire_format::fp8;
  return std::nullopt;
}

std::uint8_t to_fp8_e4m3(float v) {
  if (std::isnan(v))
    return 0x7f;
  std::uint8_t sign = std::signbit(v) ? 0x80 : 0;
  float a = std::min(std::fabs(v), fp8_max); // saturate, as torch's fp8 casts in torchft's quantizer do
  const auto& t = fp8_table();
  auto hi = std::lower_bound(t.begin(), t.end(), a);
  if (hi == t.begin())
    return sign;
  auto lo = hi - 1;
  if (hi == t.end())
    return static_cast<std::uint8_t>(sign | (lo - t.begin()));
  float dlo = a - *lo, dhi = *hi - a;
  auto code =
    static_cast<std::uint8_t>((dlo < dhi || (dlo == dhi && ((lo - t.begin()) & 1) == 0) ? lo : hi) - t.begin());
  return static_cast<std::uint8_t>(sign | code);
}

float from_fp8_e4m3(std::uint8_t code) {
  if ((code & 0x7f) == 0x7f)
    return std::nanf("");
  float v = fp8_table()[code & 0x7f];
  return code & 0x80 ? -v : v;
}

std::uint16_t to_bf16(float v) {
  auto bits = std::bit_cast<std::uint32_t>(v);
  if (std::isnan(v))
    return static_cast<std::uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1); // round to nearest even
  return static_cast<std::uint16_t>(bits >> 16);
}

float from_bf16(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

quantized_rows quantize_rows(std::span<const float> x, std::int64_t cols, wire_format f) {
  if (cols < 1)
    throw std::invalid_argument(fmt::format("quantize_rows: rows of {} values", cols));
  if (f == wire_format::sparse2)
    throw std::invalid_argument("quantize_rows: sparse2 parts are made by sparse_topk_2bit");
  quantized_rows q;
  q.format = f, q.values = static_cast<std::int64_t>(x.size()), q.cols = cols;
  q.data.resize(x.size() * bytes_per_value(f));
  std::uint8_t* out = q.data.data();
  for (std::int64_t r0 = 0; r0 < q.values; r0 += cols) {
    auto row = x.subspan(static_cast<std::size_t>(r0), static_cast<std::size_t>(std::min(cols, q.values - r0)));
    for (float v : row)
      if (!std::isfinite(v))
        throw std::invalid_argument(fmt::format("quantize_rows: value {} at row {} is not finite", v, r0 / cols));
    float scale = 1.0f;
    if (f == wire_format::int8 || f == wire_format::fp8) {
      float absmax = 0;
      for (float v : row)
        absmax = std::max(absmax, std::fabs(v));
      scale = absmax > 0 ? (f == wire_format::int8 ? int8_max : fp8_max) / absmax : 1.0f;
      q.scales.push_back(scale);
    }
    for (float v : row) {
      switch (f) {
      case wire_format::f32:
        std::memcpy(out, &v, 4), out += 4;
        break;
      case wire_format::bf16: {
        auto b = to_bf16(v);
        std::memcpy(out, &b, 2), out += 2;
        break;
      }
      case wire_format::int8:
        *out++ = static_cast<std::uint8_t>(
          static_cast<std::int8_t>(std::clamp(std::nearbyint(v * scale), -int8_max, int8_max)));
        break;
      case wire_format::fp8:
        *out++ = to_fp8_e4m3(v * scale);
        break;
      case wire_format::sparse2:
        break;
      }
    }
  }
  return q;
}

expected<void> check_rows(const quantized_rows& q) {
  if (q.values < 0 || q.cols < 1)
    return make_sched_error(fmt::format("{} values in rows of {}", q.values, q.cols));
  if (static_cast<int>(q.format) < 0 || static_cast<int>(q.format) > static_cast<int>(wire_format::sparse2))
    return make_sched_error(fmt::format("unknown format {}", static_cast<int>(q.format)));
  if (q.format == wire_format::sparse2)
    return check_sparse(q);
  auto rows = static_cast<std::size_t>((q.values + q.cols - 1) / q.cols);
  auto want_scales = q.format == wire_format::int8 || q.format == wire_format::fp8 ? rows : 0;
  if (q.data.size() != static_cast<std::size_t>(q.values) * bytes_per_value(q.format) || q.scales.size() != want_scales)
    return make_sched_error(fmt::format("{} bytes and {} scales for {} values in rows of {} (format {})", q.data.size(),
                                        q.scales.size(), q.values, q.cols, static_cast<int>(q.format)));
  return {};
}

void accumulate(const quantized_rows& q, std::span<float> acc) {
  if (static_cast<std::int64_t>(acc.size()) != q.values)
    throw std::invalid_argument(fmt::format("accumulate: {} values into {}", q.values, acc.size()));
  if (auto ok = check_rows(q); !ok)
    throw std::invalid_argument("accumulate: a malformed part: " + ok.error().message);
  if (q.format == wire_format::sparse2)
    return accumulate_sparse(q, acc);
  for (std::int64_t i = 0; i < q.values; ++i) {
    auto row = static_cast<std::size_t>(i / q.cols);
    acc[static_cast<std::size_t>(i)] += decode(q, i, q.scales.empty() ? 1.0f : q.scales[row]);
  }
}

std::vector<float> reduce_sum(const std::vector<quantized_rows>& parts) {
  if (parts.empty())
    throw std::invalid_argument("reduce_sum of no parts");
  std::vector<float> acc(static_cast<std::size_t>(parts.front().values), 0.0f);
  for (const auto& p : parts)
    accumulate(p, acc);
  return acc;
}

std::vector<float> reduce_mean(const std::vector<quantized_rows>& parts) {
  if (parts.empty())
    throw std::invalid_argument("reduce_mean of no parts");
  auto acc = reduce_sum(parts);
  for (auto& v : acc)
    v /= static_cast<float>(parts.size());
  return acc;
}

} // namespace troupe::sched
