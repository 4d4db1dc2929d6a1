// bench_wire_codec: encode + decode time of the frames that cross processes
// (the data plane's and the control plane's), no sockets involved.
//
//   bench_wire_codec [--runs N]
//
// Prints the best run per frame, and for the bulk ones the rate.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/remote_codec.hpp"
#include "deploy/cluster/cluster_protocol.hpp"
#include "runtime/actor/actor_system.hpp"

namespace {

using namespace troupe;
using clock_type = std::chrono::steady_clock;

/// Seconds of one call of `f`: the best of `runs` runs of `iterations` calls
/// (the build machines are shared: the best run is the one least disturbed).
template <class F>
double best_s(int runs, int iterations, F f) {
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) {
    auto t0 = clock_type::now();
    for (int i = 0; i < iterations; ++i)
      f();
    t.push_back(std::chrono::duration<double>(clock_type::now() - t0).count() / iterations);
  }
  return *std::min_element(t.begin(), t.end());
}

cluster::spans_msg big_spans_batch() {
  cluster::spans_msg m;
  m.seq = 1;
  for (std::uint16_t a = 0; a < 64; ++a)
    m.batch.actors.push_back({a, fmt::format("r0s{}", a), "pipeline_stage", 0, "stage"});
  for (std::size_t i = 0; i < cluster::max_batch_spans; ++i) {
    span s;
    s.begin_ns = static_cast<std::int64_t>(i) * 1000, s.end_ns = s.begin_ns + 500, s.bytes = i, s.flow = i, s.step = 3,
    s.microbatch = static_cast<std::int32_t>(i % 8), s.actor = static_cast<std::uint16_t>(i % 64),
    s.kind = span_kind::forward;
    m.batch.spans.push_back(s);
  }
  for (int i = 0; i < 256; ++i)
    m.batch.counters.push_back({i * 1000, "loss", 2.5, i});
  return m;
}

} // namespace

int main(int argc, char** argv) {
  int runs = 7;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string{argv[i]} == "--runs")
      runs = std::atoi(argv[++i]);
  troupe_config cfg{runtime_options{}};
  caf::actor_system sys{cfg};
  // A receiver that drops what it gets: deliver's cost is the decode and one enqueue.
  auto sink = sys.spawn([](caf::event_based_actor* self) -> caf::behavior {
    self->set_default_handler(caf::drop);
    return {[](start_atom) {}};
  });
  auto local = [&](std::uint16_t) { return sink; };

  activation_msg act{7, 3, 2, tensor_handle::zeros({8, 512, 768}), {}};
  for (int h = 0; h < 8; ++h)
    act.route.push_back({h, 0});
  double act_s = best_s(runs, 200'000, [&] { (void)remote::deliver(remote::encode(1, forward_atom{}, act), local); });

  credit_msg credit{1, 4, 0.25, 0.5};
  double credit_s =
    best_s(runs, 200'000, [&] { (void)remote::deliver(remote::encode(1, credit_atom{}, credit), local); });

  outer_part_msg part;
  part.step = 10, part.values = 4 << 20, part.cols = 1024, part.format = 2;
  part.data.assign(4 << 20, 3);
  part.scales.assign(4096, 0.5f);
  double part_s = best_s(runs, 50, [&] { (void)remote::deliver(remote::encode(1, outer_part_atom{}, part), local); });
  double part_bytes = static_cast<double>(part.data.size() + part.scales.size() * sizeof(float));

  auto spans = big_spans_batch();
  std::size_t spans_meta = cluster::encode(spans).meta.size();
  double spans_s = best_s(runs, 20, [&] {
    auto got = cluster::decode<cluster::spans_msg>(cluster::encode(spans));
    if (!got || got->batch.spans.size() != spans.batch.spans.size())
      std::abort();
  });

  run_summary summary;
  summary.actor = "r0s3", summary.steps = 100'000, summary.tokens = 1 << 30;
  summary.losses.assign(100'000, 2.75);
  double summary_s = best_s(runs, 50, [&] { (void)cluster::decode<run_summary>(cluster::encode(summary)); });

  fmt::print("frame                                     encode+decode   rate\n");
  fmt::print("activation [8,512,768] f32, 8 hops        {:9.0f} ns\n", act_s * 1e9);
  fmt::print("credit                                    {:9.0f} ns\n", credit_s * 1e9);
  fmt::print("outer part, 4 MiB u8 + 16 KiB scales      {:9.1f} us   {:.1f} GB/s\n", part_s * 1e6,
             part_bytes / part_s * 1e-9);
  fmt::print("spans batch, {} spans ({} KiB meta)    {:9.1f} us   {:.1f} GB/s\n", spans.batch.spans.size(),
             spans_meta / 1024, spans_s * 1e6, static_cast<double>(spans_meta) / spans_s * 1e-9);
  fmt::print("run summary, 100k losses                  {:9.1f} us   {:.1f} GB/s\n", summary_s * 1e6,
             800'000.0 / summary_s * 1e-9);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}
