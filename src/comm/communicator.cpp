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

Request Communicator::send_recv(const Tensor& send, int to, Tensor& recv, int from, const Event& after) {
  (void)after;
  FT_THROW() << describe() << " has no point-to-point exchange (send_recv of " << send.describe() << " to rank " << to
             << ", " << recv.describe() << " from rank " << from << "), which ring attention (parallel context) needs";
}

}  // namespace ftrain
