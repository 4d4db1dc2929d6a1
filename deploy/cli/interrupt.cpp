// Signal handlers that only record the signal; the run loops poll it.
#include "deploy/cli/interrupt.hpp"

#include <signal.h>

#include <stdexcept>

namespace troupe::cli {

namespace {

std::atomic<int> received{0};
static_assert(std::atomic<int>::is_always_lock_free, "read from a signal handler");
struct sigaction old_int, old_term;
bool installed = false;

extern "C" void on_signal(int sig) {
  if (sig == SIGINT && received.load() != 0) { // the second Ctrl-C: the user means it
    ::signal(SIGINT, SIG_DFL);
    ::raise(SIGINT);
    return;
  }
  received.store(sig);
}

} // namespace

interrupt_guard::interrupt_guard() {
  if (installed)
    throw std::logic_error("interrupt_guard: one at a time");
  received.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  installed = true;
}

interrupt_guard::~interrupt_guard() {
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  installed = false;
}

const std::atomic<int>& interrupt_guard::signal() noexcept {
  return received;
}

} // namespace troupe::cli
