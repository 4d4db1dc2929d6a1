// Linear layer: one product forward (bias and residual added as it writes), two
// backward (the bias gradient summed inside the weight-gradient product).
#include "ops/linear.hpp"

#include <cstring>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_bf16.hpp"
#include "kernels/cpu/gemm_f32.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

namespace kc = kernels::cpu;

namespace {
/// The product in the requested arithmetic.
void gemm(precision p, bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc) {
  if (p == precision::bf16)
    kc::sgemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    kc::sgemm_fused(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, {});
}

shape_t with_last(const shape_t& s, std::int64_t last) {
  shape_t out = s;
  out[s.rank() - 1] = last;
  return out;
}
} // namespace

tensor_handle linear_forward(const tensor_handle& x, const tensor_handle& w, const tensor_handle& b) {
  return linear_forward(x, w, b, tensor_handle{});
}

tensor_handle linear_forward(const tensor_handle& x, const tensor_handle& w, const tensor_handle& b,
                             const tensor_handle& residual, precision p) {
  constexpr auto op = "linear_forward";
  require_f32(w, op, "w");
  require(w.rank() == 2, op, "w must be [out, in]");
  const long out = w.dim(0), in = w.dim(1);
  require_f32(x, op, "x", in);
  if (b.defined())
    require(b.numel() == out && b.type() == dtype::f32, op, "b must be f32 [out]");
  const long n = rows_of(x);
  if (residual.defined()) {
    require_f32(residual, op, "residual", out);
    require(residual.numel() == n * out, op, "residual must have the output's shape");
  }
  auto y = tensor_handle::empty(with_last(x.shape(), out), dtype::f32, x.device());
  switch (x.device().kind) {
  case device::kind_t::cpu: {
    if (p == precision::f32) { // bias and residual are added as the product writes y
      kc::gemm_epilogue e{b.defined() ? b.data<float>() : nullptr,
                          residual.defined() ? residual.data<float>() : nullptr, int(out), nullptr};
      kc::sgemm_fused(false, true, int(n), int(out), int(in), 1.0f, x.data<float>(), int(in), w.data<float>(), int(in),
                      residual.defined() ? 1.0f : 0.0f, y.data<float>(), int(out), e);
      return y;
    }
    // The product accumulates onto y prepared as bias (+ residual) rows in one pass.
    float beta = 1.0f;
    if (residual.defined() && b.defined())
      kc::add_rows(b.data<float>(), residual.data<float>(), y.data<float>(), n, out);
    else if (residual.defined())
      std::memcpy(y.raw(), residual.raw(), y.nbytes());
    else if (b.defined())
      kc::broadcast_rows(b.data<float>(), y.data<float>(), n, out);
    else
      beta = 0.0f;
    gemm(p, false, true, int(n), int(out), int(in), 1.0f, x.data<float>(), int(in), w.data<float>(), int(in), beta,
         y.data<float>(), int(out));
    return y;
  }
  case device::kind_t::cuda:
    break; // kernels/cuda launchers go here
  }
  unsupported_device(op, x.device());
}

tensor_handle linear_backward_input(const tensor_handle& dy, const tensor_handle& w, precision p) {
  constexpr auto op = "linear_backward_input";
  require_f32(w, op, "w");
  require(w.rank() == 2, op, "w must be [out, in]");
  const long out = w.dim(0), in = w.dim(1);
  require_f32(dy, op, "dy", out);
  const long n = rows_of(dy);
  auto dx = tensor_handle::empty(with_last(dy.shape(), in), dtype::f32, dy.device());
  switch (dy.device().kind) {
  case device::kind_t::cpu:
    gemm(p, false, false, int(n), int(in), int(out), 1.0f, dy.data<float>(), int(out), w.data<float>(), int(in), 0.0f,
         dx.data<float>(), int(in));
    return dx;
  case device::kind_t::cuda:
    break;
  }
  unsupported_device(op, dy.device());
}

void linear_backward_weight(const tensor_handle& dy, const tensor_handle& x, tensor_handle& dw, tensor_handle& db,
                            float scale, precision p) {
  constexpr auto op = "linear_backward_weight";
  require_f32(dw, op, "dw");
  require(dw.rank() == 2, op, "dw must be [out, in]");
  const long out = dw.dim(0), in = dw.dim(1);
  require_f32(dy, op, "dy", out);
  require_f32(x, op, "x", in);
  const long n = rows_of(dy);
  require(rows_of(x) == n, op, "x and dy must have the same number of rows");
  switch (dy.device().kind) {
  case device::kind_t::cpu:
    if (db.defined())
      require(db.numel() == out, op, "db must be [out]");
    if (p == precision::f32) { // db's column sums of dy run inside the product
      kc::sgemm_fused(true, false, int(out), int(in), int(n), scale, dy.data<float>(), int(out), x.data<float>(),
                      int(in), 1.0f, dw.data<float>(), int(in),
                      {nullptr, nullptr, 0, db.defined() ? db.data<float>() : nullptr});
      return;
    }
    gemm(p, true, false, int(out), int(in), int(n), scale, dy.data<float>(), int(out), x.data<float>(), int(in), 1.0f,
         dw.data<float>(), int(in));
    if (db.defined()) {
      if (scale == 1.0f)
        kc::column_sum_add(dy.data<float>(), db.data<float>(), n, out);
      else
        for (long r = 0; r < n; ++r)
          for (long i = 0; i < out; ++i)
            db.data<float>()[i] += scale * dy.data<float>()[r * out + i];
    }
    return;
  case device::kind_t::cuda:
    break;
  }
  unsupported_device(op, dy.device());
}

tensor_handle linear_backward(const tensor_handle& dy, const tensor_handle& x, const tensor_handle& w,
                              tensor_handle& dw, tensor_handle& db, precision p) {
  auto dx = linear_backward_input(dy, w, p);
  linear_backward_weight(dy, x, dw, db, 1.0f, p);
  return dx;
}

} // namespace troupe::ops
