// Encoding and delivery of the data-plane frames of remote_codec.hpp's table:
// each payload's inspect() says its fields, so nothing here names a field.
#include "actors/remote_codec.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>

#include "runtime/actor/errors.hpp"

namespace troupe::remote {

namespace {

/// What a kind's payload must hold beyond its inspect()'s own checks: only
/// the bare (hops_atom, step, from, count) has none of its own.
caf::error check(const auto&) {
  return {};
}
caf::error check(const std::tuple<hops_atom, step_t, std::int32_t, std::int32_t>& x) {
  auto count = std::get<3>(x);
  return count >= 0 ? caf::error{} : make_error(errc::malformed_frame, fmt::format("hops count {}", count));
}

template <class Atom, class... Ts>
caf::error send(const caf::actor& to, std::tuple<Atom, Ts...>&& x) {
  std::apply([&](Atom, Ts&... xs) { caf::anon_send(to, Atom::value, std::move(xs)...); }, x);
  return {};
}

} // namespace

caf::error deliver(net::frame&& f, const std::function<caf::actor(std::uint16_t)>& local) {
  caf::error result;
  bool known = data_table::visit(f.kind, [&]<class Entry>(Entry) {
    std::uint16_t dest = 0;
    typename Entry::values x{};
    if ((result = wire::read(f, dest, x)) || (result = check(x)))
      return;
    auto to = local(dest);
    result =
      to ? send(to, std::move(x)) : make_error(errc::malformed_frame, fmt::format("no actor {} on this node", dest));
  });
  return known ? result : make_error(errc::malformed_frame, fmt::format("unknown data frame kind {}", f.kind));
}

} // namespace troupe::remote
