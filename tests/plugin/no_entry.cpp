// A shared library that is not a troupe plugin: it lacks troupe_register_plugin.
extern "C" int troupe_not_a_plugin() {
  return 42;
}
