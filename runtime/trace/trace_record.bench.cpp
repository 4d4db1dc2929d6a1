// Cost of recording: nanoseconds per scoped_span (two clock reads and a ring
// write) with the recorder on and off, of one dashboard poll of the rings, and
// of writing spans to the trace file (trace_writer's thread, off the actors' path).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "runtime/trace/trace.hpp"
#include "runtime/trace/trace_writer.hpp"

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
  auto a = r.register_actor("bench", std::string{stage_role});
  constexpr int n = 2'000'000;
  r.disable();
  ns_per_span(n / 10, a); // warm up
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

  // The file: spans as tiny-gpt's stages record them (microbatch, flows), 60,000 a flush.
  auto file = std::filesystem::temp_directory_path() / ("troupe_bench_trace_" + std::to_string(::getpid()) + ".json");
  auto w = trace_writer::open(file, 0, std::chrono::hours{1});
  if (!w) {
    std::printf("trace_writer: cannot open %s\n", file.c_str());
    return 1;
  }
  constexpr int per_flush = 60'000, flushes = 5;
  double write_ns = 0;
  for (int f = 0; f < flushes; ++f) {
    for (int i = 0; i < per_flush; ++i) {
      span s;
      s.actor = a, s.kind = i % 3 ? span_kind::forward : span_kind::send, s.step = f, s.microbatch = i % 8;
      s.begin_ns = trace_now(), s.end_ns = s.begin_ns + 1000, s.flow = i % 3 ? 0 : i + 1, s.bytes = 4096;
      r.record(s);
    }
    auto t1 = std::chrono::steady_clock::now();
    (*w)->flush();
    write_ns += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t1).count();
  }
  (*w)->finish();
  auto bytes = std::filesystem::file_size(file);
  std::filesystem::remove(file);
  double per = write_ns / (per_flush * flushes);
  std::printf(
    "trace file: %.0f ns per span written (%.0f bytes each); tiny-gpt's ~1,500 spans/s cost %.2f%% of a core\n", per,
    static_cast<double>(bytes) / (per_flush * flushes), 1500 * per / 1e7);
}
