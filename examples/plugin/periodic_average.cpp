// An example plugin: a local-update method of its own in one file and one
// registration. Plain periodic parameter averaging ("local SGD"): every replica
// trains on its own and, every `sync_every` steps, every stage's parameters are
// replaced by their mean over the replicas. A graph selects it with
//   plugins: [path/to/libtroupe_periodic_average.so]
//   local_update: {algorithm: periodic_average, sync_every: 8}
#include <map>
#include <stdexcept>

#include "schedulers/sync/sync_policy.hpp"

namespace {

using namespace troupe;
using namespace troupe::sched;

/// One replica's side: a mean_exchange of the stage's parameters over every
/// replica (reduce-scatter, then all-gather), the mean copied back.
class periodic_average final : public sync_policy {
public:
  explicit periodic_average(const sync_setup& s) : setup_(s) {}

  std::vector<sync_send> prepare(int f, std::int64_t, std::span<const float> local) override {
    std::vector<int> everyone;
    for (int r = 0; r < setup_.replicas; ++r)
      everyone.push_back(r);
    auto format = parse_wire_format(setup_.spec.quantize).value_or(wire_format::f32);
    auto& ex =
      exchanges_.insert_or_assign(f, mean_exchange(everyone, setup_.replica, format, sync_row_values)).first->second;
    return ex.start(local);
  }
  std::vector<sync_send> receive(int f, int from, int round, int piece, quantized_rows part) override {
    return exchanges_.at(f).receive(from, round, piece, std::move(part));
  }
  bool ready(int f) const override {
    auto it = exchanges_.find(f);
    return it != exchanges_.end() && it->second.done() && !it->second.taken();
  }
  void perform(int f, std::span<float> local) override {
    auto mean = exchanges_.at(f).take(); // kept until the next prepare: late members may still ask it
    if (mean.size() != local.size())
      throw std::invalid_argument("periodic_average: the mean and the stage's values differ in size");
    std::copy(mean.begin(), mean.end(), local.begin());
    ++done_;
  }
  long exchanges() const override { return done_; }
  // Its checkpoint part: the count. Every exchange prepares and performs after
  // the same inner step, so none is under way between steps, where checkpoints fall.
  sync_state save() const override {
    for (const auto& [f, ex] : exchanges_)
      if (!ex.taken())
        throw std::logic_error("periodic_average: a checkpoint while an exchange is under way");
    return {{}, {{"performed", done_}}};
  }
  std::vector<sync_send> restore(const sync_state& s) override {
    done_ = static_cast<long>(s.count("performed"));
    return {};
  }

private:
  sync_setup setup_;
  std::map<int, mean_exchange> exchanges_;
  long done_ = 0;
};

} // namespace

extern "C" void troupe_register_plugin() {
  register_sync_method("periodic_average",
                       {"average every stage's parameters over the replicas every sync_every steps",
                        [](const local_update_spec&) { return param_fragments(1); },
                        [](const local_update_spec& s) { return periodic_schedule({s.sync_every}); },
                        [](const sync_setup& s) { return std::make_unique<periodic_average>(s); },
                        // The keys it reads under `local_update:`; any other is refused at its position.
                        {{sync_every_option(500), quantize_option()}, nullptr, nullptr}});
}
