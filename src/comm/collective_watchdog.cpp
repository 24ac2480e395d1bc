#include "comm/collective_watchdog.hpp"

#include <atomic>
#include <cmath>
#include <sstream>

namespace ftrain {

namespace {
std::atomic<double> g_timeout_seconds{kDefaultCollectiveTimeoutSeconds};
}

void set_collective_timeout(double seconds) { g_timeout_seconds.store(seconds); }
double collective_timeout_seconds() { return g_timeout_seconds.load(); }

std::string describe_timeout(double seconds) {
  if (seconds <= 0) return "off";
  std::ostringstream s;
  if (seconds >= 60 && std::fmod(seconds, 60.0) == 0)
    s << seconds / 60 << " min";
  else
    s << seconds << " s";
  return s.str();
}

std::string describe_unit(const std::string& unit) {
  return unit.empty() ? std::string("outside the FSDP units (step-level reduction)") : "for unit '" + unit + "'";
}

CollectiveWatchdog::CollectiveWatchdog(OnExpiry on_expiry, std::chrono::milliseconds poll)
    : on_expiry_(std::move(on_expiry)), poll_(poll) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::uint64_t CollectiveWatchdog::begin(Watch watch, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint64_t id = next_id_++;
  watches_.emplace(id, std::make_pair(std::move(watch), now));
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  return id;
}

void CollectiveWatchdog::end(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  watches_.erase(id);
}

std::size_t CollectiveWatchdog::in_flight() {
  std::lock_guard<std::mutex> lock(mutex_);
  return watches_.size();
}

std::string CollectiveWatchdog::check(Clock::time_point now, double timeout_seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = watches_.begin(); it != watches_.end();) {
    if (it->second.first.done && it->second.first.done())
      it = watches_.erase(it);
    else
      ++it;
  }
  if (timeout_seconds <= 0 || watches_.empty()) return {};
  // Ids grow with begin(): the first entry is the oldest.
  const auto& [watch, since] = watches_.begin()->second;
  const double age = std::chrono::duration<double>(now - since).count();
  if (age < timeout_seconds) return {};
  std::ostringstream s;
  s << "rank " << watch.rank << ": " << watch.collective << " " << describe_unit(watch.unit)
    << " has not completed after " << static_cast<long long>(age) << " s (collective_timeout "
    << describe_timeout(timeout_seconds) << "): a peer stopped calling collectives or the network hangs; aborting the job";
  return s.str();
}

void CollectiveWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_ && !fired_) {
    wake_.wait_for(lock, poll_, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    const std::string message = check(Clock::now(), collective_timeout_seconds());
    lock.lock();
    if (!message.empty() && !stop_) {
      fired_ = true;
      lock.unlock();
      on_expiry_(message);
      return;
    }
  }
}

}  // namespace ftrain
