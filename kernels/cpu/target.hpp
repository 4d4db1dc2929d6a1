// Which SIMD target the CPU kernels run on. Google Highway compiles each kernel for
// every x86 target (AVX-512, AVX2, SSE4, a portable baseline) or Arm's, and picks the
// best one this processor supports at run time; TROUPE_CPU_TARGET or set_kernel_target
// caps that choice, so one binary runs, and is tested, on every CPU.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>

namespace troupe::kernels::cpu {

/// The target the kernels dispatch to now: "avx512_dl", "avx512", "avx2", "sse4",
/// "ssse3", "neon", "sve", ... or "baseline" (Highway's portable scalar code).
std::string kernel_target();

/// The targets this build has code for and this processor runs, best first.
std::vector<std::string> supported_kernel_targets();

/// Caps dispatch at `name` (a name from supported_kernel_targets(), any case) or, for
/// "best" or "", lifts the cap. An unknown or unsupported name is an error that lists
/// the valid ones; the previous choice stays.
caf::error set_kernel_target(std::string_view name);

/// Applies TROUPE_CPU_TARGET once per process (every kernel entry calls this; it is one
/// relaxed load after the first call). A bad value is an error the first caller reports:
/// the `troupe` command checks it at start with kernel_target_from_env().
void ensure_kernel_target();

/// TROUPE_CPU_TARGET applied now: none when unset or valid, else what is wrong with it.
caf::error kernel_target_from_env();

/// What BLAS runs the large products here: OpenBLAS's core name and build ("Zen",
/// "SkylakeX", "Haswell" ...), which it picks itself on Debian (DYNAMIC_ARCH).
std::string blas_core();

/// One line for logs and `troupe run/check`: "kernels avx512 (AVX3_DL), OpenBLAS SkylakeX".
std::string kernel_summary();

} // namespace troupe::kernels::cpu

/// Calls the best compiled version of a Highway kernel `fn` (HWY_EXPORT-ed) for this
/// processor, under the TROUPE_CPU_TARGET cap.
#define TROUPE_DISPATCH(fn) (::troupe::kernels::cpu::ensure_kernel_target(), HWY_DYNAMIC_DISPATCH(fn))
