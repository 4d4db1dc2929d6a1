// The built-in `network:` presets. `geo12`: 12 Google Cloud regions, the delay
// and bandwidth between every two measured by SkipPipe's authors (Blagoev et al.
// 2025, arXiv 2502.19913, the communication matrix of its geo-distributed setting;
// published in github.com/gensyn-ai/skippipe, schedulers/communication_costs.py,
// DELAY_BANDWIDTHS: delay in ms, bandwidth in GiB/s). The numbers are copied as
// published, including NL-London's 0.000237 GiB/s (about 250 KB/s, far below its
// neighbours: an outlier a plan routes around). Two nodes in one region use
// SkipPipe's same-cluster link (1 ms, 2 GiB/s, its delay_map default).
#include "runtime/graph/network_presets.hpp"

#include <algorithm>

namespace troupe {

namespace {

struct measured {
  const char* a;
  const char* b;
  double delay_ms;
  double gib_per_s;
};

constexpr double gib = 1024.0 * 1024.0 * 1024.0;

// clang-format off
constexpr measured geo12_links[] = {
    {"Australia", "Belgium", 129, 0.00982666015625},
    {"Australia", "Canada", 98, 0.01318359375},
    {"Australia", "Germany", 125.5, 0.01046142578125},
    {"Australia", "Iowa", 84, 0.01123046875},
    {"Australia", "Japan", 58, 0.0137939453125},
    {"Australia", "LA", 69, 0.0146484375},
    {"Australia", "NL", 128, 0.009521484375},
    {"Australia", "Oregon", 68, 0.0146484375},
    {"Australia", "Singapore", 48, 0.02978515625},
    {"Australia", "Taiwan", 67, 0.02099609375},
    {"Australia", "London", 132, 0.0093994140625},
    {"Belgium", "Canada", 41, 0.0198974609375},
    {"Belgium", "Germany", 4, 0.2425},
    {"Belgium", "Iowa", 49, 0.0283203125},
    {"Belgium", "Japan", 112, 0.01171875},
    {"Belgium", "LA", 70, 0.0194091796875},
    {"Belgium", "NL", 3, 0.2425},
    {"Belgium", "Oregon", 66, 0.0208740234375},
    {"Belgium", "Singapore", 83, 0.01611328125},
    {"Belgium", "Taiwan", 105, 0.012451171875},
    {"Belgium", "London", 3.5, 0.2425},
    {"Canada", "Germany", 44, 0.0318603515625},
    {"Canada", "Iowa", 14, 0.07568359375},
    {"Canada", "Japan", 74, 0.01806640625},
    {"Canada", "LA", 35, 0.030517578125},
    {"Canada", "NL", 42, 0.0250244140625},
    {"Canada", "Oregon", 30.5, 0.047119140625},
    {"Canada", "Singapore", 107, 0.01193847},
    {"Canada", "Taiwan", 89, 0.01470947265625},
    {"Canada", "London", 38.5, 0.036376953125},
    {"Germany", "Iowa", 53.5, 0.026611328125},
    {"Germany", "Japan", 112, 0.011083984375},
    {"Germany", "LA", 73, 0.01824951171875},
    {"Germany", "NL", 3.5, 0.2425},
    {"Germany", "Oregon", 68, 0.0149169921875},
    {"Germany", "Singapore", 80, 0.0125},
    {"Germany", "Taiwan", 102, 0.0125732421875},
    {"Germany", "London", 6.6, 0.18875},
    {"Iowa", "Japan", 72.5, 0.01397705078125},
    {"Iowa", "LA", 23.4, 0.06146240234375},
    {"Iowa", "NL", 51, 0.02740478515625},
    {"Iowa", "Oregon", 19.3, 0.09033203125},
    {"Iowa", "Singapore", 101.5, 0.01263427734375},
    {"Iowa", "Taiwan", 88, 0.0128},
    {"Iowa", "London", 48.1, 0.0218505859375},
    {"Japan", "LA", 50, 0.02777099609375},
    {"Japan", "NL", 108.5, 0.011376953125},
    {"Japan", "Oregon", 46.2, 0.03045654296875},
    {"Japan", "Singapore", 35.6, 0.03900146484375},
    {"Japan", "Taiwan", 19.2, 0.07672119140625},
    {"Japan", "London", 107, 0.00888671875},
    {"LA", "NL", 71.5, 0.014251708984375},
    {"LA", "Oregon", 12.4, 0.1185302734375},
    {"LA", "Singapore", 79.5, 0.016845703125},
    {"LA", "Taiwan", 64, 0.016192626953125},
    {"LA", "London", 68, 0.0149169921875},
    {"NL", "Oregon", 67, 0.0203857421875},
    {"NL", "Singapore", 81.5, 0.016357421875},
    {"NL", "Taiwan", 105.5, 0.011962890625},
    {"NL", "London", 4.8, 0.00023681640625},
    {"Oregon", "Singapore", 78.5, 0.01678466796875},
    {"Oregon", "Taiwan", 59.5, 0.0233154296875},
    {"Oregon", "London", 64, 0.021240234375},
    {"Singapore", "Taiwan", 23.2, 0.0618896484375},
    {"Singapore", "London", 85, 0.01568603515625},
    {"Taiwan", "London", 109.5, 0.0089599609375},
};
// clang-format on

network_preset geo12() {
  network_preset p;
  p.name = "geo12";
  p.source = "SkipPipe (arXiv 2502.19913), measured between Google Cloud regions; gensyn-ai/skippipe "
             "schedulers/communication_costs.py";
  p.locations = {"Australia", "Belgium", "Canada", "Germany",   "Iowa",   "Japan",
                 "LA",        "NL",      "Oregon", "Singapore", "Taiwan", "London"};
  const auto n = p.locations.size();
  p.links.assign(n, std::vector<network_link>(n));
  auto index = [&](const char* name) {
    return static_cast<std::size_t>(std::find(p.locations.begin(), p.locations.end(), name) - p.locations.begin());
  };
  for (const auto& m : geo12_links) {
    network_link l{m.delay_ms * 1e-3, m.gib_per_s * gib};
    p.links[index(m.a)][index(m.b)] = l;
    p.links[index(m.b)][index(m.a)] = l;
  }
  p.within = {1e-3, 2 * gib};
  return p;
}

} // namespace

const std::vector<network_preset>& network_presets() {
  static const std::vector<network_preset> presets{geo12()};
  return presets;
}

std::vector<std::string> network_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : network_presets())
    names.push_back(p.name);
  return names;
}

const network_preset* find_network_preset(std::string_view name) {
  for (const auto& p : network_presets())
    if (p.name == name)
      return &p;
  return nullptr;
}

network_link network_section::link(int a, int b) const {
  auto la = node_locations[static_cast<std::size_t>(a)], lb = node_locations[static_cast<std::size_t>(b)];
  return la == lb ? within : links[static_cast<std::size_t>(la)][static_cast<std::size_t>(lb)];
}

} // namespace troupe
