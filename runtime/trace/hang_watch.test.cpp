// The hang detector: the board says what an actor does inside a handler, and
// the watcher names an actor stuck in one longer than its limit, once, while
// it is still stuck.
#include "runtime/trace/hang_watch.hpp"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <doctest/doctest.h>

using namespace troupe;
using namespace std::chrono_literals;

TEST_CASE("the board reads back the message and the action an actor is in, and nothing between handlers") {
  auto& b = activity_board::global();
  b.reset();
  CHECK_FALSE(b.now(7));
  b.enter(7, "activation");
  auto a = b.now(7);
  REQUIRE(a);
  CHECK(describe(*a) == "handling an activation message");
  b.run(7, span_kind::backward_input, 41, 3, 1);
  a = b.now(7);
  REQUIRE(a);
  CHECK(a->step == 41);
  CHECK(a->microbatch == 3);
  CHECK(a->chunk == 1);
  CHECK(describe(*a) == "backward_input of microbatch 3, step 42, chunk 1 (handling an activation message)");
  b.leave(7);
  CHECK_FALSE(b.now(7));
  b.enter(7, "continue"); // a fresh handler forgets the last one's action
  CHECK(describe(*b.now(7)) == "handling a continue message");
  b.leave(7);
  CHECK_FALSE(b.now(activity_board::max_actors)); // past the ids: nothing, and no crash
}

TEST_CASE("an actor stuck in a handler past the limit is named with what it does, once, while it is stuck") {
  trace_recorder::global().reset();
  activity_board::global().reset();
  auto id = trace_recorder::global().register_actor("r1s2", "pipeline_stage", 0, std::string{stage_role});
  auto quick = trace_recorder::global().register_actor("r0s2", "pipeline_stage", 0, std::string{stage_role});
  std::mutex mtx;
  std::vector<std::string> lines;
  std::atomic<bool> stuck{true};
  std::vector<bool> stuck_when_reported;
  {
    hang_watch watch{0.2, 3, [&](const std::string& line) {
                       std::lock_guard lock{mtx};
                       lines.push_back(line);
                       stuck_when_reported.push_back(stuck.load());
                     }};
    std::thread actor{[&] { // one handler that sleeps 1 s in the forward of microbatch 2, step 5
      activity_board::global().enter(id, "continue");
      activity_board::global().run(id, span_kind::forward, 4, 2, 0);
      std::this_thread::sleep_for(1s);
      stuck = false;
      activity_board::global().leave(id);
    }};
    std::thread busy{[&] { // many short handlers: never named
      for (int i = 0; i < 100; ++i) {
        activity_board::global().enter(quick, "gradient");
        std::this_thread::sleep_for(5ms);
        activity_board::global().leave(quick);
      }
    }};
    actor.join();
    busy.join();
    std::this_thread::sleep_for(300ms);
  }
  std::lock_guard lock{mtx};
  REQUIRE(lines.size() == 1);
  CHECK(stuck_when_reported[0]);
  CHECK(lines[0].find("hang: actor 'r1s2' (pipeline_stage, node 3) has been in one handler for") == 0);
  CHECK(lines[0].find("longer than trace.hang_after (0.2 s): forward of microbatch 2, step 5, chunk 0 (handling a "
                      "continue message)") != std::string::npos);
  trace_recorder::global().reset();
}

TEST_CASE("a watch with no limit starts no thread and names nothing") {
  trace_recorder::global().reset();
  auto id = trace_recorder::global().register_actor("s0", "pipeline_stage");
  activity_board::global().enter(id, "start");
  int reports = 0;
  hang_watch off{0, 0, [&](const std::string&) { ++reports; }};
  std::this_thread::sleep_for(50ms);
  CHECK(reports == 0);
  activity_board::global().leave(id);
  trace_recorder::global().reset();
}
