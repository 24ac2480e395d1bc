// The Communicator defaults; see communicator.hpp.
#include "comm/communicator.hpp"

#include "base/error.hpp"

namespace ftrain {

Request Communicator::all_gather_v(const Tensor& send, Tensor& recv, const std::vector<std::int64_t>& counts,
                                   const Event& after) {
  (void)recv, (void)counts, (void)after;
  FT_THROW() << describe() << " has no all_gather_v (variable-count all-gather of " << send.describe()
             << "), which the FP8 all-gather needs: use `fp8 all_gather off`";
}

}  // namespace ftrain
