// gpt_cuda: parameter upload, microbatch slots and forward/backward driving.
#include "ops/cuda/gpt_cuda.hpp"

#include <cmath>
#include <new>

#include <fmt/format.h>

#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/embedding.hpp"
#include "ops/cuda/gpt_cuda_impl.hpp"
#include "ops/cuda/optimizer_cuda.hpp"

namespace troupe::ops {

namespace {
constexpr std::int64_t align_elems = 128; // 512 bytes of f32, 256 of bf16

std::int64_t round_up(std::int64_t n) {
  return (n + align_elems - 1) / align_elems * align_elems;
}

} // namespace

gpt_cuda::gpt_cuda(const gpt_config& cfg, int begin, int end, int max_batch, int device) : impl_(new impl) {
  impl_->cfg = cfg;
  impl_->begin = begin;
  impl_->end = end;
  impl_->max_batch = max_batch;
  impl_->device = device;
}

gpt_cuda::~gpt_cuda() {
  if (impl_ && impl_->stream) {
    cudaStreamSynchronize(impl_->stream);
    impl_->slots.clear();
    impl_->scratch = {};
    cudaStreamDestroy(impl_->stream);
  }
}

const gpt_config& gpt_cuda::config() const noexcept {
  return impl_->cfg;
}
int gpt_cuda::begin() const noexcept {
  return impl_->begin;
}
int gpt_cuda::end() const noexcept {
  return impl_->end;
}
cudaStream_t gpt_cuda::stream() const noexcept {
  return impl_->stream;
}
const std::vector<named_tensor>& gpt_cuda::params() const noexcept {
  return impl_->param_views;
}
const std::vector<named_tensor>& gpt_cuda::grads() const noexcept {
  return impl_->grad_views;
}
void gpt_cuda::set_fused_epilogues(bool on) noexcept {
  impl_->fused = on;
}
std::int64_t gpt_cuda::param_count() const noexcept {
  std::int64_t n = 0;
  for (const auto& p : impl_->params)
    n += p.numel;
  return n;
}

std::vector<std::string> gpt_cuda::param_names() const {
  std::vector<std::string> names;
  for (const auto& p : impl_->params)
    names.push_back(p.name);
  return names;
}

std::vector<shape_t> gpt_cuda::param_shapes() const {
  std::vector<shape_t> shapes;
  for (const auto& p : impl_->params)
    shapes.push_back(p.shape);
  return shapes;
}

gpu::status gpt_cuda::impl::alloc(std::vector<tensor_handle>& arena, std::int64_t n, dtype t, void** out) {
  try {
    arena.push_back(tensor_handle::empty({round_up(n)}, t, troupe::device::cuda(device)));
  } catch (const std::exception& e) {
    return fail("gpt_cuda", fmt::format("cannot allocate {} elements on cuda:{}: {}", n, device, e.what()));
  }
  *out = arena.back().raw();
  return {};
}

gpu::status gpt_cuda::init() {
  constexpr auto op = "gpt_cuda::init";
  auto& m = *impl_;
  const auto& cfg = m.cfg;
  if (m.ready)
    return fail(op, "already initialised");
  if (cfg.layers <= 0 || cfg.d_model <= 0 || cfg.heads <= 0 || cfg.d_model % cfg.heads != 0 || m.max_batch <= 0)
    return fail(op, "layers, d_model, heads and max_batch must be positive and heads must divide d_model");
  if (!(0 <= m.begin && m.begin < m.end && m.end <= cfg.layers))
    return fail(op, fmt::format("layer range [{}, {}) is not inside [0, {})", m.begin, m.end, cfg.layers));
  const int hd = cfg.d_model / cfg.heads;
  if (hd != 32 && hd != 64 && hd != 128)
    return fail(op, fmt::format("head_dim {} is not 32, 64 or 128", hd));
  if (!gpu::cuda_available())
    return fail(op, "no CUDA device");
  TROUPE_CUDA_CHECK(cudaSetDevice(m.device));
  TROUPE_GPU_TRY(gpu::register_cuda_allocator());
  register_cuda_optimizer_kernels(); // so an optimizer can be made over params()
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  TROUPE_GPU_TRY(m.blas.init());
  {
    std::vector<tensor_handle> ws;
    void* p = nullptr;
    constexpr std::int64_t ws_bytes = 32 << 20;
    TROUPE_GPU_TRY(m.alloc(ws, ws_bytes, dtype::u8, &p));
    m.lt_workspace = ws.back();
    TROUPE_GPU_TRY(m.lt.init(p, std::size_t(ws_bytes)));
  }

  // The CPU range draws the weights; its list fixes names, order and shapes.
  gpt_config host_cfg = cfg;
  host_cfg.precision = precision::f32;
  gpt_range host(host_cfg, m.begin, m.end);
  // Pad only large vocabularies: the cross-entropy kernel's online max turns a
  // thread's first 8-column chunk that is all −∞ into NaN, and with ≥ 8192 columns
  // every thread's first chunk (columns < 4096) is real.
  m.vocab_pad = cfg.vocab >= 8192 ? (cfg.vocab + 63) / 64 * 64 : cfg.vocab;
  for (const auto& p : host.params()) {
    cuda_param cp{p.name, p.value.shape(), m.total, p.value.numel(), p.value.rank() >= 2};
    const bool head = p.name == "lm_head.weight"; // room for the padded rows, kept zero
    m.total += round_up(head ? std::int64_t(m.vocab_pad) * cfg.d_model : cp.numel);
    m.params.push_back(cp);
  }
  std::vector<tensor_handle> keep;
  void* raw = nullptr;
  for (auto* t : {&m.master, &m.grad}) {
    TROUPE_GPU_TRY(m.alloc(keep, m.total, dtype::f32, &raw));
    *t = keep.back();
  }
  TROUPE_GPU_TRY(m.alloc(keep, m.total, dtype::bf16, &raw));
  m.wbf = keep.back();
  TROUPE_CUDA_CHECK(cudaMemsetAsync(m.master.raw(), 0, m.master.nbytes(), m.stream));
  for (std::size_t i = 0; i < m.params.size(); ++i)
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(m.master.data<float>() + m.params[i].offset, host.params()[i].value.raw(),
                                      host.params()[i].value.nbytes(), cudaMemcpyHostToDevice, m.stream));
  TROUPE_GPU_TRY(gpu::convert(m.wbf.data<bf16>(), m.master.data<float>(), m.total, m.stream));
  TROUPE_CUDA_CHECK(cudaMemsetAsync(m.grad.raw(), 0, m.grad.nbytes(), m.stream));
  for (const auto& p : m.params) {
    auto view = [&](const tensor_handle& flat) { return flat.slice(p.offset, p.offset + p.numel).reshape(p.shape); };
    m.param_views.push_back({p.name, view(m.master)});
    m.grad_views.push_back({p.name, view(m.grad)});
  }
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(m.stream)); // the host weights go out of scope
  m.ready = true;
  return {};
}

gpu::status gpt_cuda::impl::make_slot(cuda_slot& s) {
  const std::int64_t BT = std::int64_t(max_batch) * cfg.context, C = cfg.d_model;
  const std::int64_t rows = std::int64_t(max_batch) * cfg.heads * cfg.context;
  auto b16 = [&](std::int64_t n, bf16*& p) { return alloc(s.arena, n, dtype::bf16, reinterpret_cast<void**>(&p)); };
  auto f32 = [&](std::int64_t n, float*& p) { return alloc(s.arena, n, dtype::f32, reinterpret_cast<void**>(&p)); };
  auto i32 = [&](std::int64_t n, std::int32_t*& p) {
    return alloc(s.arena, n, dtype::i32, reinterpret_cast<void**>(&p));
  };
  s.resid.assign(std::size_t(local_layers()) + 1, nullptr);
  for (auto& r : s.resid)
    TROUPE_GPU_TRY(b16(BT * C, r));
  s.out_t = s.arena.back();
  s.layers.resize(std::size_t(local_layers()));
  for (auto& L : s.layers) {
    for (bf16** p : {&L.ln1, &L.q, &L.k, &L.v, &L.o, &L.att, &L.x_mid, &L.ln2})
      TROUPE_GPU_TRY(b16(BT * C, *p));
    TROUPE_GPU_TRY(b16(BT * 4 * C, L.fc));
    TROUPE_GPU_TRY(b16(BT * 4 * C, L.act));
    for (float** p : {&L.mean1, &L.rstd1, &L.mean2, &L.rstd2})
      TROUPE_GPU_TRY(f32(BT, *p));
    TROUPE_GPU_TRY(f32(rows, L.lse));
  }
  if (first())
    TROUPE_GPU_TRY(i32(BT, s.tokens));
  if (last()) {
    TROUPE_GPU_TRY(i32(BT, s.targets));
    TROUPE_GPU_TRY(b16(BT * C, s.lnf));
    TROUPE_GPU_TRY(b16(BT * vocab_pad, s.logits));
    TROUPE_GPU_TRY(f32(BT, s.meanf));
    TROUPE_GPU_TRY(f32(BT, s.rstdf));
    TROUPE_GPU_TRY(f32(1, s.loss));
    s.loss_t = s.arena.back().slice(0, 1);
    TROUPE_GPU_TRY(f32(BT, s.row_loss));
    TROUPE_GPU_TRY(i32(1, s.count));
  }
  return {};
}

gpu::status gpt_cuda::impl::make_split(cuda_slot& s) {
  const std::int64_t BT = std::int64_t(max_batch) * cfg.context, C = cfg.d_model;
  auto b16 = [&](std::int64_t n, bf16*& p) {
    return alloc(s.split_arena, n, dtype::bf16, reinterpret_cast<void**>(&p));
  };
  s.dgrad.assign(std::size_t(local_layers()) + 1, nullptr);
  for (auto& d : s.dgrad) {
    TROUPE_GPU_TRY(b16(BT * C, d));
    if (!s.dgrad0_t.defined())
      s.dgrad0_t = s.split_arena.back();
  }
  s.kept.resize(std::size_t(local_layers()));
  for (auto& k : s.kept) {
    TROUPE_GPU_TRY(b16(BT * 4 * C, k.dbig));
    TROUPE_GPU_TRY(b16(BT * C, k.dmid));
    TROUPE_GPU_TRY(b16(BT * 3 * C, k.dqkv));
  }
  return {};
}

gpu::status gpt_cuda::impl::make_scratch() {
  auto& S = scratch;
  const std::int64_t BT = std::int64_t(max_batch) * cfg.context, C = cfg.d_model;
  auto b16 = [&](std::int64_t n, bf16*& p) { return alloc(S.arena, n, dtype::bf16, reinterpret_cast<void**>(&p)); };
  TROUPE_GPU_TRY(b16(BT * 3 * C, S.qkv));
  TROUPE_GPU_TRY(b16(BT * 3 * C, S.dqkv));
  TROUPE_GPU_TRY(b16(BT * 4 * C, S.dbig));
  for (int i = 0; i < 2; ++i) {
    TROUPE_GPU_TRY(b16(BT * C, S.dres[i]));
    S.dres_t[i] = S.arena.back();
  }
  for (bf16** p : {&S.dln, &S.dmid, &S.datt, &S.dO, &S.dQ, &S.dK, &S.dV})
    TROUPE_GPU_TRY(b16(BT * C, *p));
  gpu::attention_shape as{max_batch, cfg.heads, cfg.context, cfg.d_model / cfg.heads, 0.0f};
  return alloc(S.arena, std::int64_t(gpu::attention_backward_workspace(as)), dtype::f32,
               reinterpret_cast<void**>(&S.attn_ws));
}

} // namespace troupe::ops
