#include "comm/mpi_communicator.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/mpi_collectives.hpp"
#include "comm/mpi_progress.hpp"
#include "base/error.hpp"
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

using mpi_collectives::checked_count;
using mpi_collectives::drive;
using mpi_collectives::gather_counts;
using mpi_collectives::has_mpi_gather_type;
using mpi_collectives::has_mpi_type;
using mpi_collectives::start_all_gather_v;
using mpi_collectives::start_all_gather;
using mpi_collectives::start_all_reduce_max;
using mpi_collectives::start_all_reduce_sum;
using mpi_collectives::start_reduce_scatter_sum;

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
  return name == "all_gather" || name == "all_gather_v" || name == "reduce_scatter_sum" || name == "all_reduce_sum" ||
         name == "all_reduce_max" || name == "send_recv";
}

struct CollectiveSpec {
  std::string collective;
  std::int64_t nth = 0;  // 0: none
  int rank = -1;         // -1: every rank
};

// <collective>:<n>[@<world rank>] from `variable` (unset or empty: none).
CollectiveSpec read_collective_spec(const char* variable) {
  CollectiveSpec spec;
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return spec;
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
      << variable << "='" << text
      << "': expected <collective>:<n>[@<rank>], collective one of all_gather, all_gather_v, reduce_scatter_sum, all_reduce_sum, "
         "all_reduce_max, send_recv, n >= 1, rank a world rank";
  spec.collective = name;
  spec.nth = nth;
  spec.rank = static_cast<int>(rank);
  return spec;
}

void read_fault_environment(FaultInjection& f) {
  if (f.environment_read) return;
  f.environment_read = true;
  const CollectiveSpec spec = read_collective_spec(kFaultVariable);
  if (spec.nth == 0) return;
  f.collective = spec.collective;
  f.nth = spec.nth;
  f.seen = 0;
  f.rank = spec.rank;
}

constexpr const char* kStallVariable = "FTRAIN_TEST_STALL_COLLECTIVE";

// Test-only stall (mpi_communicator.hpp): the nth issue of the collective on
// the chosen rank never returns, so this rank stops calling collectives
// while its peers wait in that one.
void maybe_stall(const char* collective, int world_rank) {
  static std::mutex mutex;
  static bool read = false;
  static CollectiveSpec spec;
  static std::int64_t seen = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!read) {
      read = true;
      spec = read_collective_spec(kStallVariable);
    }
    if (spec.nth == 0 || spec.collective != collective || (spec.rank >= 0 && spec.rank != world_rank) ||
        ++seen != spec.nth)
      return;
  }
  std::cerr << "ftrain: rank " << world_rank << ": " << kStallVariable << ": stalling before " << collective << " #"
            << spec.nth << " (test only): this rank stops calling collectives" << std::endl;
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
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
  }, "MPI_Comm_rank/MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  if (!owned_ || comm_ == MPI_COMM_NULL) return;
  try {
    // Queued behind every collective still pending on it.
    progress_->run([comm = comm_]() mutable { MPI_Comm_free(&comm); }, "MPI_Comm_free");
  } catch (const std::exception&) {
    // A destructor cannot report; MPI_Finalize reclaims the handle.
  }
}

std::string MpiCommunicator::describe() const {
  std::ostringstream s;
  s << "MPI communicator rank " << rank_ << "/" << size_;
  return s.str();
}

void MpiCommunicator::set_unit_label(const std::string& unit) { progress_->set_unit_label(unit); }
std::string MpiCommunicator::unit_label() const { return progress_->unit_label(); }

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
                               std::vector<Tensor> writes, int request_count) {
  FT_CHECK(request_count >= 1 && request_count <= 2) << collective << ": " << request_count << " MPI requests";
  maybe_stall(collective, progress_->world_rank());
  const InjectedFault fault = injected_fault(collective);
  std::string where = describe();
  std::string watched = std::string(collective) + " of " + what + " on " + where;
  return progress_->submit(
      after,
      [collective, what, where = std::move(where), start = std::move(start), fault, reads = std::move(reads),
       writes = std::move(writes), request_count]() mutable {
        if (fault.ordinal > 0) {
          int world_rank = -1;
          MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
          if (fault.rank < 0 || fault.rank == world_rank)
            throw Error("rank " + std::to_string(world_rank) + " (" + where + "): " + collective + " of " + what +
                        " failed: injected fault at call " + std::to_string(fault.ordinal) + " (" + kFaultVariable +
                        ", test only)");
        }
        for (const Tensor& t : reads) tsan::note_read(t.data(), t.nbytes());
        MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        start(requests);
        drive(requests, request_count);
        for (const Tensor& t : writes) tsan::note_write(const_cast<void*>(t.data()), t.nbytes());
        // The buffers are done with: drop the job's references now. The job
        // lives in the request's shared state until the request goes, and a
        // unit's tensor and context group keep their requests until the end
        // of the step (their errors surface there), which kept every layer's
        // gathered rows, partial sums and ring blocks alive until then.
        start = nullptr;
        reads.clear();
        writes.clear();
      },
      clock_, std::move(watched));
}

namespace {
// MPI moves host memory only: device buffers go through the staged
// communicator (`device_comm mpi`, comm/staged_communicator.hpp) or NCCL.
void require_host(const char* collective, const Tensor& t) {
  FT_CHECK(t.device() == Device::host) << collective << ": " << t.describe()
                                       << " is device memory; the MPI communicator moves host buffers only "
                                          "(device runs use device_comm nccl or mpi)";
}
}  // namespace

// The lambdas hold the tensors (shared storage) until the collective has run.
Request MpiCommunicator::all_gather(const Tensor& send, Tensor& recv, const Event& after) {
  FT_CHECK(send.dtype() == recv.dtype() && recv.numel() == send.numel() * size_ && has_mpi_gather_type(send.dtype()))
      << "all_gather: send " << send.describe() << ", recv " << recv.describe() << ", " << size_ << " ranks";
  require_host("all_gather", send);
  require_host("all_gather", recv);
  checked_count(recv);
  const bool in_place = mpi_collectives::gathers_in_place(send, recv, rank_);
  return issue("all_gather", send.describe(), after, [send, recv, in_place, comm = comm_](MPI_Request* r) {
    start_all_gather(send, recv, in_place, comm, r);
  }, {send}, {recv});
}

Request MpiCommunicator::all_gather_v(const Tensor& send, Tensor& recv, const std::vector<std::int64_t>& counts,
                                      const Event& after) {
  FT_CHECK(static_cast<int>(counts.size()) == size_)
      << "all_gather_v: " << counts.size() << " counts for " << size_ << " ranks";
  auto g = std::make_shared<const mpi_collectives::GatherCounts>(gather_counts(counts));
  FT_CHECK(send.dtype() == recv.dtype() && has_mpi_gather_type(send.dtype()) &&
           send.numel() == counts[static_cast<std::size_t>(rank_)] && recv.numel() == g->total)
      << "all_gather_v: send " << send.describe() << " (rank " << rank_ << " count "
      << counts[static_cast<std::size_t>(rank_)] << "), recv " << recv.describe() << " (total " << g->total << ")";
  require_host("all_gather_v", send);
  require_host("all_gather_v", recv);
  // The counts live in the closure, which lives until the collective completed.
  return issue("all_gather_v", send.describe(), after, [send, recv, g, comm = comm_](MPI_Request* r) {
    start_all_gather_v(send, recv, *g, comm, r);
  }, {send}, {recv});
}

Request MpiCommunicator::reduce_scatter_sum(const Tensor& send, Tensor& recv, const Event& after) {
  FT_CHECK(send.dtype() == recv.dtype() && send.numel() == recv.numel() * size_ && has_mpi_type(send.dtype()))
      << "reduce_scatter: send " << send.describe() << ", recv " << recv.describe() << ", " << size_ << " ranks";
  require_host("reduce_scatter_sum", send);
  require_host("reduce_scatter_sum", recv);
  checked_count(send);
  return issue("reduce_scatter_sum", send.describe(), after, [send, recv, comm = comm_](MPI_Request* r) {
    start_reduce_scatter_sum(send, recv, comm, r);
  }, {send}, {recv});
}

Request MpiCommunicator::all_reduce_sum(Tensor& inout, const Event& after) {
  FT_CHECK(has_mpi_type(inout.dtype())) << "all_reduce_sum: no MPI type for " << inout.describe();
  require_host("all_reduce_sum", inout);
  checked_count(inout);
  return issue("all_reduce_sum", inout.describe(), after, [inout, comm = comm_](MPI_Request* r) {
    start_all_reduce_sum(inout, comm, r);
  }, {inout}, {inout});
}

Request MpiCommunicator::all_reduce_max(Tensor& inout, const Event& after) {
  FT_CHECK(inout.dtype() == DType::f32) << "all_reduce_max: " << inout.describe() << " (f32 only)";
  require_host("all_reduce_max", inout);
  checked_count(inout);
  return issue("all_reduce_max", inout.describe(), after, [inout, comm = comm_](MPI_Request* r) {
    start_all_reduce_max(inout, comm, r);
  }, {inout}, {inout});
}

Request MpiCommunicator::send_recv(const Tensor& send, int to, Tensor& recv, int from, const Event& after) {
  mpi_collectives::check_send_recv(send, to, recv, from, size_, describe());
  require_host("send_recv", send);
  require_host("send_recv", recv);
  return issue("send_recv", send.describe() + " to rank " + std::to_string(to) + ", from rank " + std::to_string(from),
               after, [send, to, recv, from, comm = comm_](MPI_Request* r) {
                 mpi_collectives::start_send_recv(send, to, recv, from, comm, r);
               }, {send}, {recv}, /*request_count=*/2);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) const {
  MPI_Comm sub = MPI_COMM_NULL;
  progress_->run([&] { FT_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub)); }, "split (MPI_Comm_split) on " + describe());
  return std::make_unique<MpiCommunicator>(sub, /*owned=*/true);
}

std::unique_ptr<Communicator> MpiCommunicator::split_node() const {
  MPI_Comm sub = MPI_COMM_NULL;
  progress_->run(
      [&] { FT_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &sub)); },
      "split_node (MPI_Comm_split_type) on " + describe());
  return std::make_unique<MpiCommunicator>(sub, /*owned=*/true);
}

void MpiCommunicator::barrier() {
  progress_->run([&] { FT_MPI_CHECK(MPI_Barrier(comm_)); }, "barrier on " + describe());
}

double MpiCommunicator::all_reduce_sum(double value) {
  double out = 0;
  progress_->run([&] { FT_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_SUM, comm_)); },
                 "all_reduce_sum of one f64 on " + describe());
  return out;
}

double MpiCommunicator::all_reduce_max(double value) {
  double out = 0;
  progress_->run([&] { FT_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, comm_)); },
                 "all_reduce_max of one f64 on " + describe());
  return out;
}

std::int64_t MpiCommunicator::all_reduce_sum(std::int64_t value) {
  std::int64_t out = 0;
  progress_->run([&] { FT_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_INT64_T, MPI_SUM, comm_)); },
                 "all_reduce_sum of one i64 on " + describe());
  return out;
}

}  // namespace ftrain
