// Cost of recording: nanoseconds per scoped_span (two clock reads and a ring
// write) with the recorder on and off, and of one dashboard poll of the rings.
#include <chrono>
#include <cstdio>

#include "runtime/trace/trace.hpp"

using namespace troupe;

namespace {

double ns_per_span(int n, std::uint16_t actor) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    scoped_span s(actor, span_kind::forward, 0, i);
  }
  auto dt = std::chrono::steady_clock::now() - t0;
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(dt).count()) / n;
}

} // namespace

int main() {
  auto& r = trace_recorder::global();
  auto a = r.register_actor("bench", "pipeline_stage");
  constexpr int n = 2'000'000;
  r.disable();
  ns_per_span(n / 10, a);  // warm up
  double off = ns_per_span(n, a);
  r.enable(1 << 16);
  ns_per_span(n / 10, a);
  double on = ns_per_span(n, a);
  std::vector<span> out;
  trace_recorder::cursor c;
  auto t0 = std::chrono::steady_clock::now();
  r.collect(c, out);
  auto poll_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  std::printf("scoped_span: %.1f ns with the recorder off, %.1f ns on (%.1f ns to record)\n", off, on, on - off);
  std::printf("collect: %.0f us for %zu spans (one ring)\n", poll_us, out.size());
  std::printf("tiny-gpt records about 200 spans per step: %.1f us per step\n", 200 * (on - off) / 1000);
}
