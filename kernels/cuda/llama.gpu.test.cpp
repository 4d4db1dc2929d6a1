// Checks the GPU's Llama kernels against the CPU's scalar references (kernels/cpu/).
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cpu/rms_norm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/swiglu.hpp"
#include "kernels/cuda/llama.hpp"
#include "kernels/cuda/test_support.hpp"

using namespace troupe::gpu;
using namespace troupe::gpu::testing;
namespace cpu = troupe::kernels::cpu;

namespace {
std::vector<double> widen(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}
} // namespace

TEST_CASE("rms norm forward and backward on the GPU match the CPU reference") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  for (int cols : {768, 100}) {
    const int rows = 515;
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    auto x = random_normal(n, 1, 3.0f), w = random_normal(std::size_t(cols), 2), dy = random_normal(n, 3),
         dw0 = random_normal(std::size_t(cols), 4);
    device_buffer<float> dx_in(x), dwt(w), y(n), rstd(static_cast<std::size_t>(rows)), ddy(dy), dx(n), dw(dw0);
    TROUPE_REQUIRE_OK(rms_norm_forward(y.get(), rstd.get(), dx_in.get(), dwt.get(), rows, cols, 1e-5f, nullptr));
    TROUPE_REQUIRE_OK(
      rms_norm_backward(dx.get(), dw.get(), ddy.get(), dx_in.get(), dwt.get(), rstd.get(), rows, cols, nullptr));
    std::vector<float> ry(n), rrs(static_cast<std::size_t>(rows)), rdx(n), rdw = dw0;
    cpu::rms_norm_forward_reference(x.data(), w.data(), ry.data(), rrs.data(), rows, cols, 1e-5f);
    cpu::rms_norm_backward_input_reference(dy.data(), x.data(), rrs.data(), w.data(), rdx.data(), rows, cols);
    cpu::rms_norm_backward_weight_reference(dy.data(), x.data(), rrs.data(), rdw.data(), rows, cols);
    INFO("cols=" << cols);
    check_close<float>("rms_norm_forward y", y.download(), widen(ry));
    check_close<float>("rms_norm_forward rstd", rstd.download(), widen(rrs));
    check_close<float>("rms_norm_backward dx", dx.download(), widen(rdx));
    check_close<float>("rms_norm_backward dw", dw.download(), widen(rdw));
  }
}

TEST_CASE("swiglu and rope on the GPU match the CPU references") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  const int rows = 300, hidden = 344;
  auto gu = random_normal(std::size_t(rows) * 2 * hidden, 5, 3.0f), dy = random_normal(std::size_t(rows) * hidden, 6);
  device_buffer<float> dgu_in(gu), ddy(dy), y(dy.size()), dgu(gu.size());
  TROUPE_REQUIRE_OK(swiglu_forward(y.get(), dgu_in.get(), rows, hidden, nullptr));
  TROUPE_REQUIRE_OK(swiglu_backward(dgu.get(), ddy.get(), dgu_in.get(), rows, hidden, nullptr));
  std::vector<float> ry(dy.size()), rdgu(gu.size());
  cpu::swiglu_forward_reference(gu.data(), ry.data(), rows, hidden);
  cpu::swiglu_backward_reference(dy.data(), gu.data(), rdgu.data(), rows, hidden);
  check_close<float>("swiglu_forward", y.download(), widen(ry));
  check_close<float>("swiglu_backward", dgu.download(), widen(rdgu));

  const int heads = 6, hd = 64, ld = 3 * heads * hd, positions = 128;
  std::vector<float> cos(std::size_t(positions * hd / 2)), sin(cos.size());
  cpu::rope_table(10000.0, hd, positions, cos.data(), sin.data());
  std::vector<std::int32_t> pos(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r)
    pos[std::size_t(r)] = r % positions;
  auto x = random_normal(std::size_t(rows) * ld, 7);
  for (bool inverse : {false, true}) {
    device_buffer<float> dxx(x), dcos(cos), dsin(sin);
    std::int32_t* dpos = nullptr;
    REQUIRE(cudaMalloc(&dpos, pos.size() * sizeof(std::int32_t)) == cudaSuccess);
    REQUIRE(cudaMemcpy(dpos, pos.data(), pos.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice) == cudaSuccess);
    TROUPE_REQUIRE_OK(rope_rotate(dxx.get(), rows, ld, 2 * heads, hd, dpos, dcos.get(), dsin.get(), inverse, nullptr));
    auto got = dxx.download();
    (void)cudaFree(dpos);
    auto want = x;
    cpu::rope_rotate_reference(want.data(), rows, ld, 2 * heads, hd, pos.data(), 10000.0, inverse);
    INFO("inverse=" << inverse);
    check_close<float>("rope_rotate", got, widen(want));
  }
}
