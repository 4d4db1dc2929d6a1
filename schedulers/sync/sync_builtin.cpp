// The built-in local-update methods (#13): each is defined in its own file,
// `register_NAME` in schedulers/sync/NAME.cpp, and listed once in sync_builtin.def.
#include "schedulers/sync/sync_policy.hpp"

namespace troupe::sched {

#define TROUPE_SYNC_METHOD(name) void register_##name(const sync_registrar& add);
#include "schedulers/sync/sync_builtin.def"
#undef TROUPE_SYNC_METHOD

void register_builtin_sync_methods(const sync_registrar& add) {
#define TROUPE_SYNC_METHOD(name) register_##name(add);
#include "schedulers/sync/sync_builtin.def"
#undef TROUPE_SYNC_METHOD
}

} // namespace troupe::sched
