// The UCX transport (not yet implemented: every call says so).
#include "runtime/errors.hpp"
#include "runtime/transport_detail.hpp"

namespace troupe::net::detail {

std::string ucx_unavailable_reason() {
  return "the UCX transport is not built yet";
}

caf::expected<std::unique_ptr<server>> ucx_listen(server_options, handlers) {
  return make_error(errc::invalid_argument, ucx_unavailable_reason());
}

caf::expected<std::unique_ptr<connection>> ucx_connect(connect_options, handlers) {
  return make_error(errc::invalid_argument, ucx_unavailable_reason());
}

} // namespace troupe::net::detail
