#include "comm/mpi_communicator.hpp"

#include <chrono>
#include <cstring>
#include <thread>
#include <sstream>

#include "core/error.hpp"

namespace ftrain {

void check_mpi(int code, const char* call, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw Error(std::string(file) + ":" + std::to_string(line) + ": rank " + std::to_string(rank) + ": " + call +
              " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

namespace {

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const bf16*>(in);
  auto* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_bf16(to_float(a[i]) + to_float(b[i]));
}

struct MpiTypes {
  MPI_Datatype bf16_type = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum_op = MPI_OP_NULL;
};

// Created on first use (after MPI_Init); freed by MPI_Finalize.
const MpiTypes& mpi_types() {
  static MpiTypes types = [] {
    MpiTypes t;
    FT_MPI_CHECK(MPI_Type_contiguous(1, MPI_UINT16_T, &t.bf16_type));
    FT_MPI_CHECK(MPI_Type_commit(&t.bf16_type));
    FT_MPI_CHECK(MPI_Op_create(&bf16_sum, /*commute=*/1, &t.bf16_sum_op));
    return t;
  }();
  return types;
}

MPI_Datatype mpi_type(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32: return MPI_FLOAT;
    case DType::bf16: return mpi_types().bf16_type;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: FT_THROW() << "no MPI type for " << t.describe();
  }
}

MPI_Op mpi_sum(const Tensor& t) { return t.dtype() == DType::bf16 ? mpi_types().bf16_sum_op : MPI_SUM; }

class MpiRequest final : public Request::Impl {
 public:
  explicit MpiRequest(MPI_Request r) : request_(r) {}
  ~MpiRequest() override {
    // A request dropped unfinished would leave MPI writing into freed memory.
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  // Polls with a short sleep instead of MPI_Wait's busy loop: the waiter is
  // usually the communication thread, which must not take the core away
  // from the computing thread while its peers catch up.
  void wait() override {
    int done = 0;
    for (int spins = 0;; ++spins) {
      FT_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
      if (done) return;
      if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  bool test() override {
    int done = 0;
    FT_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }

 private:
  MPI_Request request_;
};

int checked_count(const Tensor& t) {
  FT_CHECK(t.numel() <= 2147483647) << t.describe() << " is too large for one MPI call";
  return static_cast<int>(t.numel());
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  FT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  FT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiCommunicator::~MpiCommunicator() {
  if (owned_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::string MpiCommunicator::describe() const {
  std::ostringstream s;
  s << "MPI communicator rank " << rank_ << "/" << size_;
  return s.str();
}

Request MpiCommunicator::all_gather(const Tensor& send, Tensor& recv) {
  FT_CHECK(send.dtype() == recv.dtype() && recv.numel() == send.numel() * size_)
      << "all_gather: send " << send.describe() << ", recv " << recv.describe() << ", " << size_ << " ranks";
  MPI_Request r;
  FT_MPI_CHECK(MPI_Iallgather(send.data(), checked_count(send), mpi_type(send), recv.data(), checked_count(send),
                              mpi_type(recv), comm_, &r));
  return Request(std::make_unique<MpiRequest>(r));
}

Request MpiCommunicator::reduce_scatter_sum(const Tensor& send, Tensor& recv) {
  FT_CHECK(send.dtype() == recv.dtype() && send.numel() == recv.numel() * size_)
      << "reduce_scatter: send " << send.describe() << ", recv " << recv.describe() << ", " << size_ << " ranks";
  MPI_Request r;
  FT_MPI_CHECK(MPI_Ireduce_scatter_block(send.data(), recv.data(), checked_count(recv), mpi_type(send),
                                         mpi_sum(send), comm_, &r));
  return Request(std::make_unique<MpiRequest>(r));
}

Request MpiCommunicator::all_reduce_sum(Tensor& inout) {
  MPI_Request r;
  FT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, inout.data(), checked_count(inout), mpi_type(inout), mpi_sum(inout),
                              comm_, &r));
  return Request(std::make_unique<MpiRequest>(r));
}

Request MpiCommunicator::all_reduce_max(Tensor& inout) {
  FT_CHECK(inout.dtype() == DType::f32) << "all_reduce_max: " << inout.describe() << " (f32 only)";
  MPI_Request r;
  FT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, inout.data(), checked_count(inout), MPI_FLOAT, MPI_MAX, comm_, &r));
  return Request(std::make_unique<MpiRequest>(r));
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) const {
  MPI_Comm sub;
  FT_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  return std::make_unique<MpiCommunicator>(sub, /*owned=*/true);
}

std::unique_ptr<Communicator> MpiCommunicator::split_node() const {
  MPI_Comm sub;
  FT_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &sub));
  return std::make_unique<MpiCommunicator>(sub, /*owned=*/true);
}

bool MpiCommunicator::supports_threaded_progress() const {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided >= MPI_THREAD_SERIALIZED;
}

void MpiCommunicator::barrier() { FT_MPI_CHECK(MPI_Barrier(comm_)); }

double MpiCommunicator::all_reduce_sum(double value) {
  double out = 0;
  FT_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_SUM, comm_));
  return out;
}

double MpiCommunicator::all_reduce_max(double value) {
  double out = 0;
  FT_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, comm_));
  return out;
}

std::int64_t MpiCommunicator::all_reduce_sum(std::int64_t value) {
  std::int64_t out = 0;
  FT_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_INT64_T, MPI_SUM, comm_));
  return out;
}

}  // namespace ftrain
