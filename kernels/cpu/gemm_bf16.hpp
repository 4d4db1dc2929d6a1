// Matrix products with bf16 inputs and f32 accumulation (AVX-512 BF16 dot products),
// for the GPT's `precision: bf16`; operands stay f32 in memory and are rounded here.
#pragma once

namespace troupe::kernels::cpu {

/// C = alpha · bf16(op(A)) · bf16(op(B)) + beta · C, row-major like sgemm, with every
/// input element rounded to bf16 (nearest even) and products summed in f32.
/// Uses _mm512_dpbf16_ps where the processor has AVX512_BF16, else rounds copies
/// of the inputs and calls sgemm (same rounding, different summation order).
void sgemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                int ldb, float beta, float* c, int ldc);

/// x rounded to the nearest bf16 (ties to even), returned as f32.
float round_bf16(float x);

} // namespace troupe::kernels::cpu
