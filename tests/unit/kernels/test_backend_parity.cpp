// Backend parity (tests/support/backend_parity.hpp): every op on every
// registered backend/stream kind against the first one (host, synchronous),
// same random inputs, outputs compared element by element. Between host
// variants the results must be identical bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "support/backend_parity.hpp"
#include "support/backend_test.hpp"

using namespace ftrain;
using namespace ftrain::testing;

namespace {

// Results of one case on one backend, read back to the host as floats.
struct Results {
  std::vector<std::vector<float>> tensors;
  std::vector<double> scalars;
};

Results run_case(const ParityCase& c, const BackendCase& backend, std::uint64_t seed) {
  ExecutionOptions o;
  o.device = backend.device;
  o.asynchronous = backend.asynchronous;
  ExecutionContext ctx(o);
  ParityOutputs out = c.run(ctx, seed);
  ctx.synchronize();
  Results r;
  for (const Tensor& t : out.tensors)
    r.tensors.push_back(to_float_vector(t.device() == Device::host ? t : to_device(t, Device::host)));
  r.scalars = out.scalars;
  return r;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST(BackendParity, EveryOpHasACase) {
  std::vector<std::string> covered;
  for (const auto& c : parity_cases()) covered.push_back(c.op);
  for (const auto& op : all_op_names())
    EXPECT_NE(std::find(covered.begin(), covered.end(), op), covered.end())
        << "op " << op << " has no backend parity case (tests/support/backend_parity.hpp)";
}

TEST(BackendParity, EveryBackendMatchesTheSynchronousHost) {
  const auto backends = backend_cases();
  ASSERT_GE(backends.size(), 2u) << "host and host_async are always there";
  const BackendCase& reference = backends.front();
  ASSERT_EQ(reference.name, "host");
  for (const auto& c : parity_cases()) {
    for (std::uint64_t seed : {11u, 12u}) {
      const Results want = run_case(c, reference, seed);
      for (std::size_t b = 1; b < backends.size(); ++b) {
        SCOPED_TRACE(c.op + " on " + backends[b].name + " vs " + reference.name + ", seed " + std::to_string(seed));
        const bool exact = backends[b].device == reference.device;  // same kernels: same bits
        const Results got = run_case(c, backends[b], seed);
        ASSERT_EQ(got.tensors.size(), want.tensors.size());
        for (std::size_t t = 0; t < want.tensors.size(); ++t) {
          ASSERT_EQ(got.tensors[t].size(), want.tensors[t].size()) << "output " << t;
          std::size_t mismatches = 0;
          for (std::size_t i = 0; i < want.tensors[t].size(); ++i) {
            const float w = want.tensors[t][i], g = got.tensors[t][i];
            const bool ok = exact ? same_bits(w, g) : std::abs(g - w) <= 1e-3f * (1.0f + std::abs(w));
            if (!ok && mismatches++ < 3) ADD_FAILURE() << "output " << t << " element " << i << ": " << g << " vs " << w;
          }
          EXPECT_EQ(mismatches, 0u) << "output " << t;
        }
        ASSERT_EQ(got.scalars.size(), want.scalars.size());
        for (std::size_t s = 0; s < want.scalars.size(); ++s) {
          if (exact) {
            EXPECT_EQ(got.scalars[s], want.scalars[s]) << "scalar " << s;
          } else {
            EXPECT_NEAR(got.scalars[s], want.scalars[s], 1e-6 * (1.0 + std::abs(want.scalars[s]))) << "scalar " << s;
          }
        }
      }
    }
  }
}
