// Rotary positions and the grouped-query expand/reduce around core attention.
#include "ops/rope.hpp"

#include <cstring>

#include <fmt/format.h>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/rope.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

namespace kc = kernels::cpu;

rope_table make_rope_table(double theta, long head_dim, long positions) {
  constexpr auto op = "make_rope_table";
  require(head_dim > 0 && head_dim % 2 == 0, op, fmt::format("head dimension {} must be even", head_dim));
  require(theta > 0 && positions > 0, op, "theta and positions must be positive");
  rope_table t{tensor_handle::empty({positions, head_dim / 2}), tensor_handle::empty({positions, head_dim / 2}),
               head_dim, theta};
  kc::rope_table(theta, head_dim, positions, t.cos.data<float>(), t.sin.data<float>());
  return t;
}

tensor_handle rope_positions(long batch, long seq, const tensor_handle& documents) {
  constexpr auto op = "rope_positions";
  auto pos = tensor_handle::empty({batch * seq}, dtype::i32);
  auto* p = pos.data<std::int32_t>();
  if (documents.defined()) {
    require(documents.type() == dtype::i32 && documents.numel() == batch * seq && documents.device().is_cpu(), op,
            fmt::format("documents must be i32 [{}, {}] on the CPU", batch, seq));
    const auto* d = documents.data<std::int32_t>();
    for (long b = 0; b < batch; ++b)
      for (long t = 0; t < seq; ++t) {
        const auto start = d[b * seq + t];
        require(start >= 0 && start <= t, op,
                fmt::format("document start {} of token {} is not in [0, {}]", start, t, t));
        p[b * seq + t] = std::int32_t(t - start);
      }
  } else {
    for (long b = 0; b < batch; ++b)
      for (long t = 0; t < seq; ++t)
        p[b * seq + t] = std::int32_t(t);
  }
  return pos;
}

namespace {
struct pack_shape {
  long rows, c, kv, hd;
};

pack_shape check_pack(const tensor_handle& t, long width_of_kv, int heads, int kv_heads, const tensor_handle& positions,
                      const rope_table& table, const char* op) {
  require_f32(t, op, "input");
  require(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, op,
          fmt::format("kv_heads {} must divide heads {}", kv_heads, heads));
  require(t.device().is_cpu(), op, "the rotary pack runs on the CPU");
  const long rows = rows_of(t), hd = table.head_dim, c = heads * hd, kv = kv_heads * hd;
  require(t.dim(t.rank() - 1) == (width_of_kv ? c + 2 * kv : 3 * c), op,
          fmt::format("last dimension {} is not {} for {} heads of {} ({} kv)", t.dim(t.rank() - 1),
                      width_of_kv ? c + 2 * kv : 3 * c, heads, hd, kv_heads));
  require(positions.type() == dtype::i32 && positions.numel() == rows, op, "positions must be i32, one per row");
  const auto* p = positions.data<std::int32_t>();
  for (long r = 0; r < rows; ++r)
    require(p[r] >= 0 && p[r] < table.cos.dim(0), op,
            fmt::format("position {} is outside the table's [0, {})", p[r], table.cos.dim(0)));
  return {rows, c, kv, hd};
}

shape_t with_last(shape_t s, long last) {
  s[s.rank() - 1] = last;
  return s;
}
} // namespace

tensor_handle rope_pack_forward(const tensor_handle& proj, int heads, int kv_heads, const tensor_handle& positions,
                                const rope_table& table) {
  const auto [rows, c, kv, hd] = check_pack(proj, 1, heads, kv_heads, positions, table, "rope_pack_forward");
  const long group = heads / kv_heads, in_ld = c + 2 * kv, ld = 3 * c;
  auto qkv = tensor_handle::empty(with_last(proj.shape(), ld));
  const float* in = proj.data<float>();
  float* out = qkv.data<float>();
  for (long r = 0; r < rows; ++r) {
    const float* src = in + r * in_ld;
    float* dst = out + r * ld;
    std::memcpy(dst, src, std::size_t(c) * sizeof(float));
    for (long h = 0; h < heads; ++h) { // query head h reads kv head h / group
      std::memcpy(dst + c + h * hd, src + c + (h / group) * hd, std::size_t(hd) * sizeof(float));
      std::memcpy(dst + 2 * c + h * hd, src + c + kv + (h / group) * hd, std::size_t(hd) * sizeof(float));
    }
  }
  // q's and the repeated k's heads lie side by side in [0, 2C): one turn for both.
  kc::rope_rotate(out, rows, ld, 2L * heads, hd, positions.data<std::int32_t>(), table.cos.data<float>(),
                  table.sin.data<float>(), false);
  return qkv;
}

tensor_handle rope_pack_backward(const tensor_handle& dqkv, int heads, int kv_heads, const tensor_handle& positions,
                                 const rope_table& table) {
  const auto [rows, c, kv, hd] = check_pack(dqkv, 0, heads, kv_heads, positions, table, "rope_pack_backward");
  const long group = heads / kv_heads, ld = 3 * c, out_ld = c + 2 * kv;
  auto dproj = tensor_handle::empty(with_last(dqkv.shape(), out_ld));
  const float* in = dqkv.data<float>();
  float* out = dproj.data<float>();
  for (long r = 0; r < rows; ++r) {
    const float* src = in + r * ld;
    float* dst = out + r * out_ld;
    std::memcpy(dst, src, std::size_t(c) * sizeof(float));
    for (long g = 0; g < kv_heads; ++g) { // the group's first head, then the others added in head order
      std::memcpy(dst + c + g * hd, src + c + g * group * hd, std::size_t(hd) * sizeof(float));
      std::memcpy(dst + c + kv + g * hd, src + 2 * c + g * group * hd, std::size_t(hd) * sizeof(float));
      for (long h = g * group + 1; h < (g + 1) * group; ++h) {
        kc::add_inplace(dst + c + g * hd, src + c + h * hd, hd);
        kc::add_inplace(dst + c + kv + g * hd, src + 2 * c + h * hd, hd);
      }
    }
  }
  // The turn is the same for every head of a group, so it commutes with the sum:
  // q's and k's heads, side by side in [0, C + KV), turn back at once.
  kc::rope_rotate(out, rows, out_ld, heads + kv_heads, hd, positions.data<std::int32_t>(), table.cos.data<float>(),
                  table.sin.data<float>(), true);
  return dproj;
}

} // namespace troupe::ops
