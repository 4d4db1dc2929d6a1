// The donor's side of a rejoin at a stage's step boundary (#26): the loader
// names a live replica whose stage gives its whole state to the rejoining
// replica's stage once it has done the steps the loader named. The local
// optimizer's state, a DDP ring's or an outer exchange's: whichever component
// of the stack the decision reaches.
#pragma once

#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/boundary/step_boundary.hpp"
#include "actors/stage/stage_engine.hpp"
#include "runtime/actor/outer_messages.hpp"

namespace troupe {

class rejoin_donor {
public:
  /// The loader's decision `m` reached this stage, which has done `steps_done`
  /// steps; throws when it is past the step the joiner starts from.
  void take(const rejoin_msg& m, step_t steps_done, const stage_host& host) {
    if (m.steps < steps_done)
      throw std::runtime_error(fmt::format("{}: replica {} is to rejoin with this stage's state after step {}, but it "
                                           "has done {} steps already",
                                           host.config().name, m.replica, m.steps, steps_done));
    m_ = m;
  }
  /// Sends the joiner's stage this one's state if it is due: `steps_done` are
  /// the steps the loader named, and nothing the state depends on is awaited.
  void maybe_send(stage_host& host, step_t steps_done) {
    if (!m_ || m_->steps != steps_done)
      return;
    host.send(m_->to,
              caf::make_message(state_atom::value, to_state_msg(steps_done, host.config().replica, host.state())));
    m_.reset();
  }

private:
  std::optional<rejoin_msg> m_;
};

} // namespace troupe
