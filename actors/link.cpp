// The link actor (actors/link.hpp): a serialisation-plus-propagation model of
// a link, applied by delaying each message as a real link would.
#include "actors/link.hpp"

#include <algorithm>
#include <chrono>

#include <caf/all.hpp>

#include "runtime/actor/messages.hpp"

namespace troupe {

namespace {

struct link_state {
  std::chrono::steady_clock::time_point busy_until{};
  static inline const char* name = "link";
};

using link_actor = caf::stateful_actor<link_state>;

/// Tensor bytes a message carries (what occupies the link).
std::size_t payload_bytes(const caf::message& m) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (m.match_element<activation_msg>(i))
      n += m.get_as<activation_msg>(i).activation.nbytes();
    else if (m.match_element<gradient_msg>(i))
      n += m.get_as<gradient_msg>(i).gradient.nbytes();
    else if (m.match_element<ring_msg>(i))
      n += m.get_as<ring_msg>(i).chunk.nbytes();
    else if (m.match_element<batch_msg>(i))
      n += m.get_as<batch_msg>(i).tokens.nbytes() + m.get_as<batch_msg>(i).targets.nbytes();
  }
  return n;
}

caf::behavior link(link_actor* self, caf::actor dest, double bytes_per_s, double latency_s) {
  self->set_default_handler([=](caf::scheduled_actor*, caf::message_view& view) -> caf::result<caf::message> {
    auto msg = view.move_content_to_message();
    auto now = std::chrono::steady_clock::now();
    auto& st = self->state;
    auto start = std::max(now, st.busy_until);
    auto bytes = static_cast<double>(payload_bytes(msg));
    auto wire = bytes_per_s > 0 ? std::chrono::duration<double>(bytes / bytes_per_s) : std::chrono::duration<double>(0);
    st.busy_until = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(wire);
    auto arrive = st.busy_until + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(latency_s));
    self->delayed_anon_send(dest, arrive - now, std::move(msg));
    return caf::none;
  });
  return {[](caf::unit_t) {}};
}

} // namespace

caf::actor spawn_link(caf::actor_system& sys, caf::actor dest, double bytes_per_s, double latency_s) {
  return sys.spawn(link, std::move(dest), bytes_per_s, latency_s);
}

} // namespace troupe
