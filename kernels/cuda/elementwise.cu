// Element-wise kernels: one grid-stride template applies a functor per element.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.hpp"

#include <string>

namespace troupe::gpu {

namespace {

using namespace detail;

constexpr float gelu_s = 0.7978845608028654f; // sqrt(2/pi)
constexpr float gelu_c = 0.044715f;

template <typename F>
__global__ void map_kernel(std::int64_t n, F f) {
  for (std::int64_t i = blockIdx.x * (std::int64_t)blockDim.x + threadIdx.x; i < n;
       i += (std::int64_t)gridDim.x * blockDim.x)
    f(i);
}

template <typename F>
status launch(std::int64_t n, cudaStream_t stream, F f) {
  if (n < 0)
    return status::failure("element-wise kernel: negative element count " + std::to_string(n));
  if (n == 0)
    return {};
  map_kernel<<<grid_for(n, 256), 256, 0, stream>>>(n, f);
  TROUPE_CUDA_CHECK_LAUNCH();
  return {};
}

/// Applies an element functor to indices shifted by `first` (the tail after whole chunks).
template <typename F>
struct offset_op {
  F f;
  std::int64_t first;
  __device__ void operator()(std::int64_t i) const { f(i + first); }
};

// Functors rather than device lambdas, so no --extended-lambda flag is needed.
template <typename T>
struct gelu_fwd_op {
  T* y;
  const T* x;
  __device__ void operator()(std::int64_t i) const {
    float v = to_f32(x[i]);
    float t = tanhf(gelu_s * (v + gelu_c * v * v * v));
    y[i] = from_f32<T>(0.5f * v * (1.0f + t));
  }
};

template <typename T>
struct gelu_bwd_op {
  T* dx;
  const T* x;
  const T* dy;
  __device__ void operator()(std::int64_t i) const {
    float v = to_f32(x[i]);
    float t = tanhf(gelu_s * (v + gelu_c * v * v * v));
    float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * gelu_s * (1.0f + 3.0f * gelu_c * v * v);
    dx[i] = from_f32<T>(to_f32(dy[i]) * d);
  }
};

template <typename T>
struct add_op {
  T* out;
  const T* a;
  const T* b;
  __device__ void operator()(std::int64_t i) const { out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i])); }
};

template <typename D, typename S>
struct acc_op {
  D* dst;
  const S* src;
  __device__ void operator()(std::int64_t i) const { dst[i] = from_f32<D>(to_f32(dst[i]) + to_f32(src[i])); }
};

template <typename D, typename S>
struct conv_op {
  D* dst;
  const S* src;
  __device__ void operator()(std::int64_t i) const { dst[i] = from_f32<D>(to_f32(src[i])); }
};

struct scale_op {
  float* x;
  float factor;
  __device__ void operator()(std::int64_t i) const { x[i] *= factor; }
};

template <typename T>
struct fill_op {
  T* dst;
  float value;
  __device__ void operator()(std::int64_t i) const { dst[i] = from_f32<T>(value); }
};

/// The hot element-wise kernels move 16 bytes per access: `f(a, b)` maps the
/// values of one or two inputs (b is null for one) to the output.
template <typename T, typename F>
__global__ void vec_kernel(T* out, const T* a, const T* b, std::int64_t chunks, F f) {
  constexpr int V = 16 / sizeof(T);
  for (std::int64_t c = blockIdx.x * (std::int64_t)blockDim.x + threadIdx.x; c < chunks;
       c += (std::int64_t)gridDim.x * blockDim.x) {
    float x[V], y[V] = {};
    load_vec<T, V>(a + c * V, x);
    if (b != nullptr)
      load_vec<T, V>(b + c * V, y);
#pragma unroll
    for (int i = 0; i < V; ++i)
      x[i] = f(x[i], y[i]);
    store_vec<T, V>(out + c * V, x);
  }
}

struct gelu_value {
  __device__ float operator()(float v, float) const {
    float t = tanhf(gelu_s * (v + gelu_c * v * v * v));
    return 0.5f * v * (1.0f + t);
  }
};

struct gelu_grad_value {
  __device__ float operator()(float v, float dy) const {
    float t = tanhf(gelu_s * (v + gelu_c * v * v * v));
    return dy * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * gelu_s * (1.0f + 3.0f * gelu_c * v * v));
  }
};

struct sum_value {
  __device__ float operator()(float a, float b) const { return a + b; }
};

/// Runs f over whole 16-byte chunks when the pointers allow, the rest (or all) element-wise.
template <typename T, typename F, typename Fallback>
status launch_vec(T* out, const T* a, const T* b, std::int64_t n, cudaStream_t s, F f, Fallback fallback) {
  constexpr int V = 16 / sizeof(T);
  if (n < 0)
    return status::failure("element-wise kernel: negative element count " + std::to_string(n));
  if (!aligned16(out) || !aligned16(a) || !aligned16(b))
    return launch(n, s, fallback);
  std::int64_t chunks = n / V;
  if (chunks > 0) {
    vec_kernel<<<grid_for(chunks, 256), 256, 0, s>>>(out, a, b, chunks, f);
    TROUPE_CUDA_CHECK_LAUNCH();
  }
  std::int64_t done = chunks * V;
  if (done == n)
    return {};
  return launch(n - done, s, offset_op<Fallback>{fallback, done});
}

template <typename T>
status gelu_fwd(T* y, const T* x, std::int64_t n, cudaStream_t s) {
  return launch_vec<T>(y, x, nullptr, n, s, gelu_value{}, gelu_fwd_op<T>{y, x});
}
template <typename T>
status gelu_bwd(T* dx, const T* x, const T* dy, std::int64_t n, cudaStream_t s) {
  return launch_vec<T>(dx, x, dy, n, s, gelu_grad_value{}, gelu_bwd_op<T>{dx, x, dy});
}
template <typename T>
status add(T* out, const T* a, const T* b, std::int64_t n, cudaStream_t s) {
  return launch_vec<T>(out, a, b, n, s, sum_value{}, add_op<T>{out, a, b});
}
template <typename D, typename S>
status acc(D* dst, const S* src, std::int64_t n, cudaStream_t s) {
  return launch(n, s, acc_op<D, S>{dst, src});
}
template <typename D, typename S>
status conv(D* dst, const S* src, std::int64_t n, cudaStream_t s) {
  return launch(n, s, conv_op<D, S>{dst, src});
}
template <typename T>
status fill_with(T* dst, float value, std::int64_t n, cudaStream_t s) {
  return launch(n, s, fill_op<T>{dst, value});
}

} // namespace

using bf16 = __nv_bfloat16;

status gelu_forward(float* y, const float* x, std::int64_t n, cudaStream_t s) {
  return gelu_fwd(y, x, n, s);
}
status gelu_forward(bf16* y, const bf16* x, std::int64_t n, cudaStream_t s) {
  return gelu_fwd(y, x, n, s);
}
status gelu_backward(float* dx, const float* x, const float* dy, std::int64_t n, cudaStream_t s) {
  return gelu_bwd(dx, x, dy, n, s);
}
status gelu_backward(bf16* dx, const bf16* x, const bf16* dy, std::int64_t n, cudaStream_t s) {
  return gelu_bwd(dx, x, dy, n, s);
}
status residual_add(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t s) {
  return add(out, a, b, n, s);
}
status residual_add(bf16* out, const bf16* a, const bf16* b, std::int64_t n, cudaStream_t s) {
  return add(out, a, b, n, s);
}
status accumulate(float* dst, const float* src, std::int64_t n, cudaStream_t s) {
  return acc(dst, src, n, s);
}
status accumulate(float* dst, const bf16* src, std::int64_t n, cudaStream_t s) {
  return acc(dst, src, n, s);
}
status accumulate(bf16* dst, const bf16* src, std::int64_t n, cudaStream_t s) {
  return acc(dst, src, n, s);
}
status scale(float* x, float factor, std::int64_t n, cudaStream_t s) {
  return launch(n, s, scale_op{x, factor});
}
status convert(bf16* dst, const float* src, std::int64_t n, cudaStream_t s) {
  return conv(dst, src, n, s);
}
status convert(float* dst, const bf16* src, std::int64_t n, cudaStream_t s) {
  return conv(dst, src, n, s);
}
status fill(float* dst, float value, std::int64_t n, cudaStream_t s) {
  return fill_with(dst, value, n, s);
}
status fill(bf16* dst, float value, std::int64_t n, cudaStream_t s) {
  return fill_with(dst, value, n, s);
}

} // namespace troupe::gpu
