// Embedding kernels: row gathers and scatter-adds, vectorised by the compiler.
#include "kernels/cpu/embedding.hpp"

#include <algorithm>

namespace troupe::kernels::cpu {

void embedding_forward(const std::int32_t* tokens, const float* wte, const float* wpe, float* out, long batch, long seq,
                       long channels) {
  for (long b = 0; b < batch; ++b)
    for (long t = 0; t < seq; ++t) {
      const float* te = wte + long(tokens[b * seq + t]) * channels;
      float* o = out + (b * seq + t) * channels;
      if (!wpe) {
        std::copy(te, te + channels, o);
        continue;
      }
      const float* pe = wpe + t * channels;
      for (long i = 0; i < channels; ++i)
        o[i] = te[i] + pe[i];
    }
}

void embedding_backward(const float* dout, const std::int32_t* tokens, float* dwte, float* dwpe, long batch, long seq,
                        long channels) {
  for (long b = 0; b < batch; ++b)
    for (long t = 0; t < seq; ++t) {
      const float* d = dout + (b * seq + t) * channels;
      float* te = dwte + long(tokens[b * seq + t]) * channels;
      for (long i = 0; i < channels; ++i)
        te[i] += d[i];
      if (!dwpe)
        continue;
      float* pe = dwpe + t * channels;
      for (long i = 0; i < channels; ++i)
        pe[i] += d[i];
    }
}

} // namespace troupe::kernels::cpu
