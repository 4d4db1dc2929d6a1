// The kernels' SIMD target: names, the TROUPE_CPU_TARGET cap, and OpenBLAS's core.
#include "kernels/cpu/target.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include <cblas.h>
#include <fmt/format.h>
#include <hwy/highway.h>
#include <hwy/targets.h>

#include "runtime/actor/errors.hpp"

namespace troupe::kernels::cpu {

namespace {

/// troupe's name for a Highway target: what a user would call the instruction set.
std::string name_of(std::int64_t t) {
  switch (t) {
#if HWY_ARCH_X86
  case HWY_AVX3_DL:
    return "avx512_dl";
  case HWY_AVX3:
    return "avx512";
  case HWY_AVX2:
    return "avx2";
  case HWY_SSE4:
    return "sse4";
  case HWY_SSSE3:
    return "ssse3";
#endif
  case HWY_EMU128:
    return "baseline";
  case HWY_SCALAR:
    return "baseline"; // x86-64 without -m flags: Highway's scalar code
  default:
    break;
  }
  std::string s = hwy::TargetName(t);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

std::mutex cap_mutex;
std::int64_t all_supported = 0; // what the processor runs, before any cap (under cap_mutex)

/// The processor's targets that this build compiled, uncapped.
std::int64_t processor_targets() {
  std::lock_guard lock(cap_mutex);
  if (all_supported == 0) {
    hwy::SetSupportedTargetsForTest(0); // no cap yet: SupportedTargets() detects the processor's own set
    all_supported = hwy::SupportedTargets() & HWY_TARGETS;
  }
  return all_supported;
}

/// Dispatch from now on to the best of `targets`, or of the processor's when 0.
/// Highway 1.0 has two ways to narrow its choice: DisableTargets does not last, as every
/// SupportedTargets() call (kernel_target() makes one) re-detects and re-chooses from
/// all the processor has; the fixed set it keeps for tests does last, so that is used.
void dispatch_to(std::int64_t targets) {
  hwy::SetSupportedTargetsForTest(targets);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

std::atomic<bool> env_applied{false};
std::once_flag env_once;
caf::error env_error;

} // namespace

std::string kernel_target() {
  ensure_kernel_target();
  const std::int64_t now = hwy::SupportedTargets() & HWY_TARGETS;
  return name_of(now & -now); // the lowest bit is the best target
}

std::vector<std::string> supported_kernel_targets() {
  std::vector<std::string> out;
  for (std::int64_t ts = processor_targets(); ts != 0; ts &= ts - 1)
    out.push_back(name_of(ts & -ts));
  return out;
}

caf::error set_kernel_target(std::string_view name) {
  std::string want(name);
  std::transform(want.begin(), want.end(), want.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  const std::int64_t all = processor_targets();
  if (want.empty() || want == "best") {
    dispatch_to(0);
    return {};
  }
  for (std::int64_t ts = all; ts != 0; ts &= ts - 1) {
    const std::int64_t t = ts & -ts;
    std::string hwy_name = hwy::TargetName(t);
    std::transform(hwy_name.begin(), hwy_name.end(), hwy_name.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    if (want == name_of(t) || want == hwy_name) {
      dispatch_to(all & ~(t - 1)); // t and every target below it
      return {};
    }
  }
  std::string valid;
  for (const auto& s : supported_kernel_targets())
    valid += (valid.empty() ? "" : ", ") + s;
  return make_error(
    errc::invalid_argument,
    fmt::format("CPU kernel target '{}' is not one this processor and build run (valid: {}, best)", name, valid));
}

caf::error kernel_target_from_env() {
  ensure_kernel_target();
  return env_error;
}

void ensure_kernel_target() {
  if (env_applied.load(std::memory_order_relaxed))
    return;
  std::call_once(env_once, [] {
    processor_targets(); // detected before any cap
    if (const char* v = std::getenv("TROUPE_CPU_TARGET"); v && *v) {
      env_error = set_kernel_target(v);
      if (env_error)
        env_error = make_error(errc::invalid_argument, "TROUPE_CPU_TARGET: " + error_message(env_error));
    }
    env_applied.store(true, std::memory_order_release);
  });
}

std::string blas_core() {
  const char* core = openblas_get_corename();
  return core && *core ? core : "unknown";
}

std::string kernel_summary() {
  ensure_kernel_target();
  const std::int64_t now = hwy::SupportedTargets() & HWY_TARGETS, t = now & -now;
  return fmt::format("kernels {} (Highway {}), OpenBLAS {}", name_of(t), hwy::TargetName(t), blas_core());
}

} // namespace troupe::kernels::cpu
