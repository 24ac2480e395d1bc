#include "comm/mpi_communicator.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/mpi_progress.hpp"
#include "core/error.hpp"
#include "core/thread_sanitizer.hpp"

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

// Created on first use, on the progress thread; freed by MPI_Finalize.
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

bool has_mpi_type(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::i32 || t == DType::i64 || t == DType::f64;
}

// Progress thread only (mpi_types() makes MPI calls on first use).
MPI_Datatype mpi_type(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32: return MPI_FLOAT;
    case DType::bf16: return mpi_types().bf16_type;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::f64: return MPI_DOUBLE;
    default: FT_THROW() << "no MPI type for " << t.describe();
  }
}

MPI_Op mpi_sum(const Tensor& t) { return t.dtype() == DType::bf16 ? mpi_types().bf16_sum_op : MPI_SUM; }

// Drives one request to completion. Polls with a short sleep instead of
// MPI_Wait's busy loop: the progress thread must not take the core away from
// the computing thread while its peers catch up.
void drive(MPI_Request& request) {
  int done = 0;
  for (int spins = 0;; ++spins) {
    FT_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

int checked_count(const Tensor& t) {
  FT_CHECK(t.numel() <= 2147483647) << t.describe() << " is too large for one MPI call";
  return static_cast<int>(t.numel());
}

// Test-only fault injection (mpi_communicator.hpp).
struct FaultInjection {
  std::mutex mutex;
  bool environment_read = false;
  std::string collective;
  std::int64_t nth = 0;
  std::int64_t seen = 0;
  int rank = -1;  // world rank that fails; -1: every rank
};

FaultInjection& fault_injection() {
  static FaultInjection f;
  return f;
}

constexpr const char* kFaultVariable = "FTRAIN_TEST_FAIL_COLLECTIVE";

bool is_collective_name(const std::string& name) {
  return name == "all_gather" || name == "reduce_scatter_sum" || name == "all_reduce_sum" ||
         name == "all_reduce_max";
}

void read_fault_environment(FaultInjection& f) {
  if (f.environment_read) return;
  f.environment_read = true;
  const char* value = std::getenv(kFaultVariable);
  if (value == nullptr || *value == '\0') return;
  const std::string text(value);
  const auto colon = text.find(':');
  const auto at = text.find('@');
  std::int64_t nth = 0;
  long long rank = -1;
  try {
    std::size_t used = 0;
    const std::string count = colon == std::string::npos ? "" : text.substr(colon + 1, at == std::string::npos ? std::string::npos : at - colon - 1);
    nth = std::stoll(count, &used);
    if (used != count.size()) nth = 0;
    if (at != std::string::npos) {
      const std::string r = text.substr(at + 1);
      rank = std::stoll(r, &used);
      if (used != r.size() || rank < 0) nth = 0;
    }
  } catch (const std::exception&) {
    nth = 0;
  }
  const std::string name = colon == std::string::npos ? text : text.substr(0, colon);
  FT_CHECK(is_collective_name(name) && nth >= 1)
      << kFaultVariable << "='" << text
      << "': expected <collective>:<n>[@<rank>], collective one of all_gather, reduce_scatter_sum, all_reduce_sum, "
         "all_reduce_max, n >= 1, rank a world rank";
  f.collective = name;
  f.nth = nth;
  f.seen = 0;
  f.rank = static_cast<int>(rank);
}

struct InjectedFault {
  std::int64_t ordinal = 0;  // 0: this issue runs normally
  int rank = -1;             // only this world rank fails (-1: every rank)
};

// Whether this issue of `collective` is the one to fail. The world rank is
// compared on the progress thread (the caller may not call MPI).
InjectedFault injected_fault(const char* collective) {
  FaultInjection& f = fault_injection();
  std::lock_guard<std::mutex> lock(f.mutex);
  read_fault_environment(f);
  if (f.nth <= 0 || f.collective != collective || ++f.seen != f.nth) return {};
  return {f.seen, f.rank};
}

}  // namespace

void set_collective_fault_for_testing(const std::string& collective, std::int64_t nth) {
  FT_CHECK(nth == 0 || is_collective_name(collective)) << "no collective named '" << collective << "'";
  FaultInjection& f = fault_injection();
  std::lock_guard<std::mutex> lock(f.mutex);
  f.environment_read = true;  // the hook wins over the environment
  f.collective = collective;
  f.nth = nth;
  f.seen = 0;
  f.rank = -1;
  // A test that injected a failure starts the next one with a clean slate
  // (in a run, the first failure ends the job).
  MpiProgress::acquire()->clear_failure_for_testing();
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned)
    : progress_(MpiProgress::acquire()), clock_(std::make_shared<CommClock>()), comm_(comm), owned_(owned) {
  progress_->run([this] {
    FT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    FT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  });
}

MpiCommunicator::~MpiCommunicator() {
  if (!owned_ || comm_ == MPI_COMM_NULL) return;
  try {
    // Queued behind every collective still pending on it.
    progress_->run([comm = comm_]() mutable { MPI_Comm_free(&comm); });
  } catch (const std::exception&) {
    // A destructor cannot report; MPI_Finalize reclaims the handle.
  }
}

std::string MpiCommunicator::describe() const {
  std::ostringstream s;
  s << "MPI communicator rank " << rank_ << "/" << size_;
  return s.str();
}

bool MpiCommunicator::threaded_progress() const { return progress_->threaded(); }

CommTimes MpiCommunicator::times() const {
  std::lock_guard<std::mutex> lock(clock_->mutex);
  return clock_->times;
}

void MpiCommunicator::reset_times() {
  std::lock_guard<std::mutex> lock(clock_->mutex);
  clock_->times = CommTimes{};
}

Request MpiCommunicator::issue(const char* collective, const std::string& what, const Event& after,
                               std::function<void(MPI_Request*)> start, std::vector<Tensor> reads,
                               std::vector<Tensor> writes) {
  const InjectedFault fault = injected_fault(collective);
  std::string where = describe();
  return progress_->submit(
      after,
      [collective, what, where = std::move(where), start = std::move(start), fault, reads = std::move(reads),
       writes = std::move(writes)] {
        if (fault.ordinal > 0) {
          int world_rank = -1;
          MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
          if (fault.rank < 0 || fault.rank == world_rank)
            throw Error("rank " + std::to_string(world_rank) + " (" + where + "): " + collective + " of " + what +
                        " failed: injected fault at call " + std::to_string(fault.ordinal) + " (" + kFaultVariable +
                        ", test only)");
        }
        for (const Tensor& t : reads) tsan::note_read(t.data(), t.nbytes());
        MPI_Request request = MPI_REQUEST_NULL;
        start(&request);
        drive(request);
        for (const Tensor& t : writes) tsan::note_write(const_cast<void*>(t.data()), t.nbytes());
      },
      clock_);
}

// The lambdas hold the tensors (shared storage) until the collective has run.
Request MpiCommunicator::all_gather(const Tensor& send, Tensor& recv, const Event& after) {
  FT_CHECK(send.dtype() == recv.dtype() && recv.numel() == send.numel() * size_ && has_mpi_type(send.dtype()))
      << "all_gather: send " << send.describe() << ", recv " << recv.describe() << ", " << size_ << " ranks";
  checked_count(recv);
  return issue("all_gather", send.describe(), after, [send, recv, comm = comm_](MPI_Request* r) {
    FT_MPI_CHECK(MPI_Iallgather(send.data(), checked_count(send), mpi_type(send), recv.data(), checked_count(send),
                                mpi_type(recv), comm, r));
  }, {send}, {recv});
}

Request MpiCommunicator::reduce_scatter_sum(const Tensor& send, Tensor& recv, const Event& after) {
  FT_CHECK(send.dtype() == recv.dtype() && send.numel() == recv.numel() * size_ && has_mpi_type(send.dtype()))
      << "reduce_scatter: send " << send.describe() << ", recv " << recv.describe() << ", " << size_ << " ranks";
  checked_count(send);
  return issue("reduce_scatter_sum", send.describe(), after, [send, recv, comm = comm_](MPI_Request* r) {
    FT_MPI_CHECK(MPI_Ireduce_scatter_block(send.data(), recv.data(), checked_count(recv), mpi_type(send),
                                           mpi_sum(send), comm, r));
  }, {send}, {recv});
}

Request MpiCommunicator::all_reduce_sum(Tensor& inout, const Event& after) {
  FT_CHECK(has_mpi_type(inout.dtype())) << "all_reduce_sum: no MPI type for " << inout.describe();
  checked_count(inout);
  return issue("all_reduce_sum", inout.describe(), after, [inout, comm = comm_](MPI_Request* r) {
    FT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, inout.data(), checked_count(inout), mpi_type(inout), mpi_sum(inout),
                                comm, r));
  }, {inout}, {inout});
}

Request MpiCommunicator::all_reduce_max(Tensor& inout, const Event& after) {
  FT_CHECK(inout.dtype() == DType::f32) << "all_reduce_max: " << inout.describe() << " (f32 only)";
  checked_count(inout);
  return issue("all_reduce_max", inout.describe(), after, [inout, comm = comm_](MPI_Request* r) {
    FT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, inout.data(), checked_count(inout), MPI_FLOAT, MPI_MAX, comm, r));
  }, {inout}, {inout});
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) const {
  MPI_Comm sub = MPI_COMM_NULL;
  progress_->run([&] { FT_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub)); });
  return std::make_unique<MpiCommunicator>(sub, /*owned=*/true);
}

std::unique_ptr<Communicator> MpiCommunicator::split_node() const {
  MPI_Comm sub = MPI_COMM_NULL;
  progress_->run(
      [&] { FT_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &sub)); });
  return std::make_unique<MpiCommunicator>(sub, /*owned=*/true);
}

void MpiCommunicator::barrier() {
  progress_->run([&] { FT_MPI_CHECK(MPI_Barrier(comm_)); });
}

double MpiCommunicator::all_reduce_sum(double value) {
  double out = 0;
  progress_->run([&] { FT_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_SUM, comm_)); });
  return out;
}

double MpiCommunicator::all_reduce_max(double value) {
  double out = 0;
  progress_->run([&] { FT_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, comm_)); });
  return out;
}

std::int64_t MpiCommunicator::all_reduce_sum(std::int64_t value) {
  std::int64_t out = 0;
  progress_->run([&] { FT_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_INT64_T, MPI_SUM, comm_)); });
  return out;
}

}  // namespace ftrain
