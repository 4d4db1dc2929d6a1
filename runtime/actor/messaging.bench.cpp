// Local messaging between two actors carrying tensor handles: one-way
// throughput with a bounded in-flight window, and ping-pong round-trip latency.
//
//   bench_messaging [--messages N] [--round-trips N] [--runs N] [--window N] [--threads N]
//
// Prints a table of the median (and best, worst) over the runs. Targets on the
// 2-core development machine: >= 1M messages/s and a round trip < 5 us.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "runtime/actor/actor_system.hpp"
#include "runtime/actor/messages.hpp"

namespace {

using namespace troupe;
using clock_type = std::chrono::steady_clock;

struct bench_args {
  std::int64_t messages = 2'000'000;
  std::int64_t round_trips = 200'000;
  int runs = 5;
  int window = 256; ///< messages in flight before the sender waits for credit
  std::size_t threads = 0;
};

// -- throughput: the sender keeps at most `window` messages in flight ---------

caf::behavior sink(caf::event_based_actor* self, std::int64_t total, int window, caf::actor reply_to) {
  auto seen = std::make_shared<std::int64_t>(0);
  auto bytes = std::make_shared<std::int64_t>(0);
  int batch = std::max(1, window / 2);
  return {
    [=](forward_atom, const activation_msg& m) {
      *bytes += static_cast<std::int64_t>(m.activation.nbytes()); // touch the handle, not the data
      if (++*seen % batch == 0 || *seen == total)
        self->send(caf::actor_cast<caf::actor>(self->current_sender()), credit_atom::value,
                   credit_msg{static_cast<std::int32_t>(*seen % batch == 0 ? batch : *seen % batch)});
      if (*seen == total)
        self->send(reply_to, done_atom::value, *seen);
    },
  };
}

caf::behavior source(caf::event_based_actor* self, caf::actor to, std::int64_t total, int window) {
  auto sent = std::make_shared<std::int64_t>(0);
  auto handle = tensor_handle::empty({64, 128});
  auto send_some = [=](std::int64_t n) {
    for (std::int64_t i = 0; i < n && *sent < total; ++i, ++*sent)
      self->send(to, forward_atom::value, activation_msg{*sent, 0, 0, handle, {}});
  };
  return {
    [=](start_atom) { send_some(window); },
    [=](credit_atom, const credit_msg& c) { send_some(c.count); },
  };
}

double throughput_run(caf::actor_system& sys, const bench_args& a) {
  caf::scoped_actor self{sys};
  auto dst = sys.spawn(sink, a.messages, a.window, caf::actor_cast<caf::actor>(self));
  auto src = sys.spawn(source, dst, a.messages, a.window);
  auto t0 = clock_type::now();
  self->send(src, start_atom::value);
  self->receive([](done_atom, std::int64_t) {});
  double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  self->send_exit(src, caf::exit_reason::user_shutdown);
  self->send_exit(dst, caf::exit_reason::user_shutdown);
  return static_cast<double>(a.messages) / s;
}

// -- latency: one message each way, `round_trips` times ------------------------

caf::behavior ponger(caf::event_based_actor* self, std::string /*name*/) {
  return {
    [=](forward_atom, const activation_msg& m) {
      self->send(caf::actor_cast<caf::actor>(self->current_sender()), backward_atom::value,
                 gradient_msg{m.step, m.microbatch, m.hop, m.activation, {}});
    },
  };
}

caf::behavior pinger(caf::event_based_actor* self, caf::actor peer, std::int64_t total, caf::actor reply_to) {
  auto handle = tensor_handle::empty({64, 128});
  return {
    [=](start_atom) {
      self->send(peer, forward_atom::value, activation_msg{0, 0, 0, handle, {}});
    },
    [=](backward_atom, const gradient_msg& g) {
      if (g.step + 1 == total) {
        self->send(reply_to, done_atom::value, total);
        return;
      }
      self->send(peer, forward_atom::value, activation_msg{g.step + 1, 0, 0, g.gradient, {}});
    },
  };
}

double latency_run(caf::actor_system& sys, const bench_args& a) {
  caf::scoped_actor self{sys};
  auto pong = sys.spawn(ponger, std::string{"pong"}); // an argument: CAF 0.17 trips UBSan without one
  auto ping = sys.spawn(pinger, pong, a.round_trips, caf::actor_cast<caf::actor>(self));
  auto t0 = clock_type::now();
  self->send(ping, start_atom::value);
  self->receive([](done_atom, std::int64_t) {});
  double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  self->send_exit(ping, caf::exit_reason::user_shutdown);
  self->send_exit(pong, caf::exit_reason::user_shutdown);
  return s * 1e6 / static_cast<double>(a.round_trips);
}

struct stats {
  double median, best, worst;
};

stats summarise(std::vector<double> xs, bool higher_is_better) {
  std::sort(xs.begin(), xs.end());
  double lo = xs.front(), hi = xs.back();
  return {xs[xs.size() / 2], higher_is_better ? hi : lo, higher_is_better ? lo : hi};
}

bench_args parse(int argc, char** argv) {
  bench_args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    long long v = std::atoll(argv[i + 1]);
    if (k == "--messages")
      a.messages = v;
    else if (k == "--round-trips")
      a.round_trips = v;
    else if (k == "--runs")
      a.runs = static_cast<int>(v);
    else if (k == "--window")
      a.window = static_cast<int>(v);
    else if (k == "--threads")
      a.threads = static_cast<std::size_t>(v);
    else {
      fmt::print(stderr, "bench_messaging: unknown option {}\n", k);
      std::exit(2);
    }
  }
  return a;
}

} // namespace

int main(int argc, char** argv) {
  auto a = parse(argc, argv);
  auto opts = runtime_options_from_env();
  if (a.threads > 0)
    opts.threads = a.threads;
  troupe_config cfg{opts};
  caf::actor_system sys{cfg};
  throughput_run(sys, {.messages = 100'000, .window = a.window}); // warm the pools and threads
  latency_run(sys, {.round_trips = 10'000});
  std::vector<double> rates, rtts;
  for (int r = 0; r < a.runs; ++r) {
    rates.push_back(throughput_run(sys, a));
    rtts.push_back(latency_run(sys, a));
  }
  auto t = summarise(rates, true);
  auto l = summarise(rtts, false);
  fmt::print("troupe local messaging (CAF {}.{}.{}, scheduler {}, {} threads, max-throughput {}, {} runs)\n",
             CAF_MAJOR_VERSION, CAF_MINOR_VERSION, CAF_PATCH_VERSION, cfg.options().policy, cfg.options().threads,
             cfg.options().max_throughput, a.runs);
  fmt::print("{:<34} {:>12} {:>12} {:>12} {:>10}\n", "measure", "median", "best", "worst", "target");
  fmt::print("{:<34} {:>12.3f} {:>12.3f} {:>12.3f} {:>10}\n", fmt::format("throughput, M msgs/s (window {})", a.window),
             t.median / 1e6, t.best / 1e6, t.worst / 1e6, ">= 1.0");
  fmt::print("{:<34} {:>12.2f} {:>12.2f} {:>12.2f} {:>10}\n", "round trip, us", l.median, l.best, l.worst, "< 5.0");
  bool ok = t.median >= 1e6 && l.median < 5.0;
  fmt::print("targets {}\n", ok ? "met" : "NOT met");
  return 0;
}
