// Output projection: a linear layer whose weight must be square.
#include "ops/output_projection.hpp"

#include "ops/dispatch.hpp"
#include "ops/linear.hpp"

namespace troupe::ops {

namespace {
void check_weight(const tensor_handle& w, const char* op) {
  require(w.defined() && w.rank() == 2 && w.dim(0) == w.dim(1), op, "w must be [C, C]");
}
} // namespace

tensor_handle output_projection_forward(const tensor_handle& a, const tensor_handle& w, const tensor_handle& b,
                                        const tensor_handle& residual, precision p) {
  check_weight(w, "output_projection_forward");
  return linear_forward(a, w, b, residual, p);
}

tensor_handle output_projection_backward_input(const tensor_handle& dy, const tensor_handle& w, precision p) {
  check_weight(w, "output_projection_backward_input");
  return linear_backward_input(dy, w, p);
}

void output_projection_backward_weight(const tensor_handle& dy, const tensor_handle& a, tensor_handle& dw,
                                       tensor_handle& db, precision p) {
  check_weight(dw, "output_projection_backward_weight");
  linear_backward_weight(dy, a, dw, db, 1.0f, p);
}

} // namespace troupe::ops
