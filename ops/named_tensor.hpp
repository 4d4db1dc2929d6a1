// A tensor with a name: how parameter and gradient lists are passed around.
#pragma once

#include <string>

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// A parameter or gradient with its GPT-2 style name (`h.3.attn.c_attn.weight`).
struct named_tensor {
  std::string name;
  tensor_handle value;
};

} // namespace troupe::ops
