// Rotary position embedding (RoPE) in Hugging Face Llama's "rotate half" layout:
// within each head of width hd, element i pairs with i + hd/2 and turns by
// pos · θ^(-2i/hd). The backward is the same turn by the opposite angle.
#pragma once

#include <cstdint>

namespace troupe::kernels::cpu {

/// cos and sin of pos · θ^(-2i/hd) for pos in [0, positions), i in [0, hd/2): each
/// [positions, hd/2], computed in double and rounded once.
void rope_table(double theta, long head_dim, long positions, float* cos, float* sin);

/// Turns `heads` heads of `head_dim` at the start of each of `rows` rows of x (row
/// stride `ld`), row r by position pos[r], in place; `inverse` turns the other way
/// (the backward). pos[r] must be below the tables' positions.
void rope_rotate(float* x, long rows, long ld, long heads, long head_dim, const std::int32_t* pos, const float* cos,
                 const float* sin, bool inverse);

/// Scalar reference (angles in double from θ directly) the kernel is checked against.
void rope_rotate_reference(float* x, long rows, long ld, long heads, long head_dim, const std::int32_t* pos,
                           double theta, bool inverse);

} // namespace troupe::kernels::cpu
