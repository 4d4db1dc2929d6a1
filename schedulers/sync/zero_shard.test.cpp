// ZeRO's partition: every parameter element has exactly one owning shard, that
// shard's ring member holds it summed after the reduce-scatter, and the slices
// are Ψ/R each when every bucket divides by R.
#include "schedulers/sync/zero_shard.hpp"

#include <doctest/doctest.h>

using namespace troupe::sched;

namespace {

std::vector<std::vector<shard_param>> model(std::int64_t odd) {
  return {{{"wte", 256 * 16, true}, {"ln.bias", 16, false}, {"odd", odd, true}},
          {{"head", 16 * 256, true}, {"ln_f", 16, false}}};
}

} // namespace

TEST_CASE("every parameter element belongs to exactly one shard, the one that holds it reduced") {
  for (int members : {1, 2, 3, 4})
    for (std::int64_t odd : {16, 17, 1001})
      for (std::int64_t bucket : {64, 4096, 1 << 20}) {
        CAPTURE(members);
        CAPTURE(odd);
        CAPTURE(bucket);
        auto m = model(odd);
        std::vector<std::vector<std::vector<int>>> owners(m.size()); // [chunk][param][element] -> owners
        std::int64_t psi = 0;
        for (std::size_t c = 0; c < m.size(); ++c)
          for (const auto& p : m[c])
            owners[c].emplace_back(static_cast<std::size_t>(p.elements), 0), psi += p.elements;
        std::int64_t sum = 0;
        for (int r = 0; r < members; ++r) {
          auto l = make_shard_layout(m, bucket, members, r);
          sum += l.elements();
          for (const auto& s : l.segments) {
            const auto& ref = l.buckets[static_cast<std::size_t>(s.bucket)][static_cast<std::size_t>(s.tensor)];
            ring_plan plan{members, r, l.bucket_elements[static_cast<std::size_t>(s.bucket)]};
            auto n = plan.chunk_elements();
            CHECK(s.flat >= plan.owned_chunk() * n); // inside the chunk this member holds reduced
            CHECK(s.flat + s.elements <= (plan.owned_chunk() + 1) * n);
            for (std::int64_t i = 0; i < s.elements; ++i)
              ++owners[static_cast<std::size_t>(ref.chunk)][static_cast<std::size_t>(ref.index)]
                      [static_cast<std::size_t>(s.offset + i)];
          }
        }
        CHECK(sum == psi);
        bool once = true;
        for (const auto& c : owners)
          for (const auto& p : c)
            for (int o : p)
              once &= o == 1;
        CHECK(once);
      }
}

TEST_CASE("a shard owns exactly Ψ/R when every bucket's elements divide by R, else at most ceil per bucket") {
  auto m = model(16);
  for (int members : {2, 4})
    for (int r = 0; r < members; ++r) {
      auto l = make_shard_layout(m, 4096, members, r);
      CHECK(l.elements() * members == 8240); // Ψ: buckets of 4112 and 4128 elements
    }
  auto odd = make_shard_layout(model(17), 1 << 20, 4, 0); // one bucket of 8241: chunks of 2061, owned chunk 1
  CHECK(odd.elements() == 2061);
  CHECK(make_shard_layout(model(17), 1 << 20, 4, 2).elements() == 8241 - 3 * 2061); // the last chunk, short
}
