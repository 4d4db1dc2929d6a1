// QKV projection: a linear layer whose weight must be [3C, C].
#include "ops/qkv_projection.hpp"

#include "ops/dispatch.hpp"
#include "ops/linear.hpp"

namespace troupe::ops {

namespace {
void check_weight(const tensor_handle& w, const char* op) {
  require(w.defined() && w.rank() == 2 && w.dim(0) == 3 * w.dim(1), op, "w must be [3C, C]");
}
} // namespace

tensor_handle qkv_projection_forward(const tensor_handle& x, const tensor_handle& w, const tensor_handle& b,
                                     precision p) {
  check_weight(w, "qkv_projection_forward");
  return linear_forward(x, w, b, {}, p);
}

tensor_handle qkv_projection_backward_input(const tensor_handle& dqkv, const tensor_handle& w, precision p) {
  check_weight(w, "qkv_projection_backward_input");
  return linear_backward_input(dqkv, w, p);
}

void qkv_projection_backward_weight(const tensor_handle& dqkv, const tensor_handle& x, tensor_handle& dw,
                                    tensor_handle& db, precision p) {
  check_weight(dw, "qkv_projection_backward_weight");
  linear_backward_weight(dqkv, x, dw, db, 1.0f, p);
}

} // namespace troupe::ops
