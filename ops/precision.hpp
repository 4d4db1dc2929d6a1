// Arithmetic of the matrix products an op runs.
#pragma once

namespace troupe::ops {

/// f32 products, or bf16 products (inputs rounded to bf16) with f32 accumulation;
/// parameters, gradients and optimizer state stay f32 either way.
enum class precision { f32, bf16 };

} // namespace troupe::ops
