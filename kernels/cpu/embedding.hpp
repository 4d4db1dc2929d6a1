// Token + position embedding lookup and its scatter-add gradient.
#pragma once

#include <cstdint>

namespace troupe::kernels::cpu {

/// out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :] (no wpe term when wpe is null: Llama,
/// whose positions are rotary); tokens must be in range.
void embedding_forward(const std::int32_t* tokens, const float* wte, const float* wpe, float* out, long batch, long seq,
                       long channels);

/// dwte[tokens[b, t], :] += dout[b, t, :] and dwpe[t, :] += dout[b, t, :] (when dwpe is not null).
void embedding_backward(const float* dout, const std::int32_t* tokens, float* dwte, float* dwpe, long batch, long seq,
                        long channels);

} // namespace troupe::kernels::cpu
