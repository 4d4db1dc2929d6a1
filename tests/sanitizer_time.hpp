// How much longer a test may wait in a sanitized build: every test that bounds
// wall-clock time (a wait, a run's limit) stretches it by this factor.
#pragma once

namespace troupe::testing {

/// How many times longer a test may wait for the same work in a sanitized
/// build: ThreadSanitizer checks every byte a 20 MB frame's copy touches, and
/// the tiny example ran 37 s a step under it with the portable kernels. Lower
/// bounds (a paced link takes at least its time) are never scaled; only waits
/// and "not much longer" bounds are.
#if defined(__SANITIZE_THREAD__)
inline constexpr double sanitizer_time_factor = 10;
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr double sanitizer_time_factor = 3;
#else
inline constexpr double sanitizer_time_factor = 1;
#endif

} // namespace troupe::testing
