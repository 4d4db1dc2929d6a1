// Quantized outer exchanges: each format's rounding bound against the exact
// values on random rows, exact codes where the format holds the value, and no
// NaN on the wire.
#include "schedulers/sync/quantize.hpp"

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

#include <doctest/doctest.h>

using namespace troupe::sched;

namespace {

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x)
    v = d(gen) * std::exp(d(gen)); // a spread of magnitudes
  return x;
}

} // namespace

TEST_CASE("fp8 e4m3 codes round trip and round to the nearest value") {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f)
      continue; // NaN
    auto code = static_cast<std::uint8_t>(c);
    float v = from_fp8_e4m3(code);
    if (v == 0.0f)
      continue; // +0 and -0
    CHECK(to_fp8_e4m3(v) == code);
  }
  CHECK(from_fp8_e4m3(0x7e) == 448.0f);
  CHECK(to_fp8_e4m3(1000.0f) == 0x7e);                // saturates
  CHECK(from_fp8_e4m3(to_fp8_e4m3(1.0625f)) == 1.0f); // a tie goes to the even code
  CHECK(from_fp8_e4m3(to_fp8_e4m3(1.07f)) == 1.125f);
  CHECK(std::isnan(from_fp8_e4m3(0xff)));
}

TEST_CASE("each format stays within its rounding bound, reduced in f32") {
  auto x = random_values(4096 + 37, 7);
  const std::int64_t cols = 256;
  for (auto f : {wire_format::f32, wire_format::bf16, wire_format::int8, wire_format::fp8}) {
    CAPTURE(static_cast<int>(f));
    auto q = quantize_rows(x, cols, f);
    std::vector<float> back(x.size(), 0.0f);
    accumulate(q, back);
    for (std::size_t r0 = 0; r0 < x.size(); r0 += cols) {
      float absmax = 0;
      for (std::size_t i = r0; i < std::min(x.size(), r0 + cols); ++i)
        absmax = std::max(absmax, std::fabs(x[i]));
      for (std::size_t i = r0; i < std::min(x.size(), r0 + cols); ++i) {
        float err = std::fabs(back[i] - x[i]), bound = 0;
        switch (f) {
        case wire_format::f32:
          bound = 0;
          break;
        case wire_format::bf16:
          bound = std::fabs(x[i]) * 0x1p-8f;
          break;
        case wire_format::int8:
          bound = absmax * (0.5f / 127.0f) * 1.0001f;
          break;
        // 3 mantissa bits: half an ulp is 2^-4 of the value; below the normal range, of 2^-6·absmax/448·8.
        case wire_format::fp8:
          bound = std::max(std::fabs(x[i]) * 0x1p-4f, absmax / 448.0f * 0x1p-10f) * 1.0001f;
          break;
        case wire_format::sparse2:
          break; // not made by quantize_rows: sparseloco.test.cpp
        }
        CHECK(err <= bound);
      }
    }
    std::size_t want = x.size() * (f == wire_format::f32    ? 4
                                   : f == wire_format::bf16 ? 2
                                                            : 1) +
                       (f == wire_format::int8 || f == wire_format::fp8 ? 17 * sizeof(float) : 0);
    CHECK(q.wire_bytes() == want);
  }
}

TEST_CASE("the mean of quantized parts is the f32 mean of their decoded values") {
  auto a = random_values(300, 1), b = random_values(300, 2);
  auto qa = quantize_rows(a, 100, wire_format::int8), qb = quantize_rows(b, 100, wire_format::int8);
  std::vector<float> da(300, 0.0f), db(300, 0.0f);
  accumulate(qa, da);
  accumulate(qb, db);
  auto m = reduce_mean({qa, qb});
  for (std::size_t i = 0; i < 300; ++i)
    CHECK(m[i] == (da[i] + db[i]) / 2.0f);
}

TEST_CASE("a value that is not finite never goes on the wire") {
  std::vector<float> x{1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  for (auto f : {wire_format::f32, wire_format::bf16, wire_format::int8, wire_format::fp8})
    CHECK_THROWS_AS(quantize_rows(x, 2, f), std::invalid_argument);
  x[1] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(quantize_rows(x, 2, wire_format::int8), std::invalid_argument);
}
