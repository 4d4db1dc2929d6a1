// How an outer exchange travels: f32, or bf16, int8 and fp8 (e4m3) with one f32
// scale per row, reduced in f32 after dequantizing (#13; torchft's
// `should_quantize` all-reduce: per-row scale = max / row absmax).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "schedulers/expected.hpp"

namespace troupe::sched {

/// sparse2: SparseLoCo's top-k entries of each chunk with 2-bit values
/// (schedulers/sync/sparseloco.hpp); `quantize_rows` does not make it.
enum class wire_format { f32, bf16, int8, fp8, sparse2 };

/// `none`, `bf16`, `int8` or `fp8` (local_update.quantize); nullopt otherwise.
std::optional<wire_format> parse_wire_format(std::string_view name);

/// Values as they travel: rows of `cols` values (the last may be shorter),
/// `bytes_per_value` bytes each, with one scale per row for int8 and fp8.
struct quantized_rows {
  wire_format format = wire_format::f32;
  std::int64_t values = 0, cols = 0;
  std::vector<std::uint8_t> data;
  std::vector<float> scales;
  /// What crosses the link: the data and the scales.
  std::size_t wire_bytes() const noexcept { return data.size() + scales.size() * sizeof(float); }
};

/// Encodes `x` in rows of `cols` values. int8: scale = 127 / row absmax, values
/// rounded to nearest; fp8 e4m3 (max 448): scale = 448 / row absmax, rounded to
/// nearest even; bf16: rounded to nearest even, no scale. A zero row has scale 1. Throws
/// std::invalid_argument on a value that is not finite (NaN never travels).
quantized_rows quantize_rows(std::span<const float> x, std::int64_t cols, wire_format f);

/// Whether `q` is well formed: its data and scales have the sizes its format,
/// `values` and `cols` call for (else what is wrong). Parts from the network
/// are checked with it before they are decoded.
expected<void> check_rows(const quantized_rows& q);

/// `acc += decode(q)`, element by element in f32. Throws std::invalid_argument
/// when `q` is malformed (check_rows) or its size is not `acc`'s.
void accumulate(const quantized_rows& q, std::span<float> acc);

/// The mean of the decoded `parts`: summed in f32, divided by their count.
std::vector<float> reduce_mean(const std::vector<quantized_rows>& parts);
/// The sum of the decoded `parts`, in f32, in their order.
std::vector<float> reduce_sum(const std::vector<quantized_rows>& parts);

/// One fp8 e4m3 (fn: no infinities, 448 the largest) code and back.
std::uint8_t to_fp8_e4m3(float v);
float from_fp8_e4m3(std::uint8_t code);
/// bf16 rounded to nearest even, and back.
std::uint16_t to_bf16(float v);
float from_bf16(std::uint16_t bits);

} // namespace troupe::sched
