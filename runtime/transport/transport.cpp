// The transport entry points: parsing transport names, bandwidths and
// durations, and dispatching listen/connect to the TCP or UCX implementation.
#include "runtime/transport/transport.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <mutex>

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"
#include "runtime/transport/transport_detail.hpp"

namespace troupe::net {

namespace {

struct unit {
  std::string_view name;
  double scale;
};

/// Splits "1.5GB/s" into 1.5 and "GB/s" (spaces between them allowed).
bool split_number(std::string_view text, double& value, std::string_view& rest) {
  auto* first = text.data();
  auto* last = text.data() + text.size();
  auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc{} || !std::isfinite(value) || value < 0)
    return false;
  rest = std::string_view(end, static_cast<std::size_t>(last - end));
  while (!rest.empty() && rest.front() == ' ')
    rest.remove_prefix(1);
  return true;
}

/// A non-negative number followed by one of `units`, scaled by it.
template <std::size_t N>
caf::expected<double> parse_quantity(std::string_view text, const unit (&units)[N], const char* what,
                                     const char* examples) {
  double value = 0;
  std::string_view rest;
  if (split_number(text, value, rest))
    for (auto& u : units)
      if (u.name == rest)
        return value * u.scale;
  return make_error(errc::invalid_argument,
                    fmt::format("'{}' is not a {}: expected a number and a unit such as {}", text, what, examples));
}

} // namespace

std::string_view to_string(transport_kind k) noexcept {
  return k == transport_kind::ucx ? "ucx" : "tcp";
}

caf::expected<transport_kind> parse_transport(std::string_view name) {
  if (name == "tcp")
    return transport_kind::tcp;
  if (name == "ucx")
    return transport_kind::ucx;
  if (name != "auto")
    return make_error(errc::invalid_argument, fmt::format("unknown transport '{}' (known: auto, tcp, ucx)", name));
  auto why = detail::ucx_unavailable_reason();
  if (!why)
    return transport_kind::ucx;
  static std::once_flag said;
  std::call_once(said, [&] { fmt::print(stderr, "troupe: transport auto: using tcp because {}\n", *why); });
  return transport_kind::tcp;
}

caf::expected<double> parse_bandwidth(std::string_view text) {
  // Decimal units, as network links are rated.
  static constexpr unit units[] = {{"bit/s", 1.0 / 8},  {"Kbit/s", 1e3 / 8},  {"kbit/s", 1e3 / 8}, {"Mbit/s", 1e6 / 8},
                                   {"Gbit/s", 1e9 / 8}, {"Tbit/s", 1e12 / 8}, {"B/s", 1},          {"KB/s", 1e3},
                                   {"kB/s", 1e3},       {"MB/s", 1e6},        {"GB/s", 1e9},       {"TB/s", 1e12}};
  auto r = parse_quantity(text, units, "bandwidth", "10Gbit/s, 1.5GB/s, 200MB/s");
  if (r && *r <= 0)
    return make_error(errc::invalid_argument,
                      fmt::format("'{}' is not a bandwidth: it must be more than zero (leave it out for "
                                  "an unlimited link)",
                                  text));
  return r;
}

caf::expected<double> parse_duration(std::string_view text) {
  static constexpr unit units[] = {{"ns", 1e-9}, {"us", 1e-6}, {"µs", 1e-6}, {"ms", 1e-3}, {"s", 1}};
  return parse_quantity(text, units, "duration", "5ms, 200us, 0.25s, 1500ns");
}

caf::expected<std::unique_ptr<server>> listen(server_options opts, handlers h) {
  if (opts.kind == transport_kind::ucx)
    return detail::ucx_listen(std::move(opts), std::move(h));
  return detail::tcp_listen(std::move(opts), std::move(h));
}

caf::expected<std::unique_ptr<connection>> connect(connect_options opts, handlers h) {
  if (opts.kind == transport_kind::ucx)
    return detail::ucx_connect(std::move(opts), std::move(h));
  return detail::tcp_connect(std::move(opts), std::move(h));
}

} // namespace troupe::net
