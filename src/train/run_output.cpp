#include "train/run_output.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include "base/error.hpp"

namespace ftrain {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

void RunOutput::say(const std::string& text) {
  if (is_root()) {
    if (progress_shown_) std::cout << "\r\033[K";  // the log line replaces the progress line
    progress_shown_ = false;
    write(std::cout, "standard output", text);
  }
  if (rank_log_.is_open()) write(rank_log_, rank_log_path_, text);
}

void RunOutput::say_rank(const std::string& text) {
  if (rank_log_.is_open()) write(rank_log_, rank_log_path_, text);
}

// Files and batch logs (SLURM, PBS, mpirun > log) get plain lines only:
// progress_line_ is on only for a person at a terminal (train/console.hpp).
void RunOutput::progress(std::int64_t done, std::int64_t total, double eta_seconds) {
  if (!is_root() || !progress_line_.show) return;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / std::max<std::int64_t>(1, total));
  std::cout << "\r\033[K" << "step " << done << "/" << total << " [" << std::string(filled, '=')
            << std::string(kWidth - filled, ' ') << "] " << (100 * done / std::max<std::int64_t>(1, total))
            << "% ETA " << format_duration(eta_seconds) << std::flush;
  progress_shown_ = true;
}

int RunOutput::stop_with_error(const std::string& message) {
  if (is_root()) {
    if (progress_shown_) std::cout << "\r\033[K" << std::flush;
    progress_shown_ = false;
    std::cerr << ("ftrain: error: " + std::string(message) + "\n") << std::flush;
  }
  say_rank("error: " + message + "\n");
  finish(1);
  return 1;
}

int RunOutput::finish(int code) {
  if (failed_writes_.empty()) return code;
  std::ostringstream m;
  m << "ftrain: error: rank " << rank_ << ": output was lost:";
  for (const auto& f : failed_writes_) m << " " << f << ";";
  m << " exit status 1\n";
  std::cerr << m.str() << std::flush;
  return 1;
}

void RunOutput::open_rank_log(const std::string& path) {
  rank_log_path_ = path;
  rank_log_.open(rank_log_path_);
  if (!rank_log_) FT_USER_ERROR() << "cannot write " << rank_log_path_ << ": " << std::strerror(errno);
}

void RunOutput::open_metrics(const std::string& path, const std::string& kept) {
  metrics_path_ = path;
  metrics_.open(metrics_path_, std::ios::trunc);
  if (!metrics_) FT_USER_ERROR() << "cannot write " << metrics_path_;
  write(metrics_, metrics_path_, kept);
}

void RunOutput::write(std::ostream& out, const std::string& file, const std::string& text) {
  if (!out) return;  // already reported: the stream stays failed
  // metrics.jsonl is read line by line (plot_metrics.py, resume keeps its
  // rows): a line a full disk cut short is cut off again, whole lines or none.
  const bool whole_lines = &out == &metrics_;
  std::error_code size_error;
  const auto size_before = whole_lines ? std::filesystem::file_size(file, size_error) : 0;
  errno = 0;
  out << text << std::flush;
  if (out) return;
  const std::string why = errno != 0 ? std::strerror(errno) : "write failed";
  if (whole_lines && !size_error && ::truncate(file.c_str(), static_cast<off_t>(size_before)) != 0) {
    // /dev/full or a file we may not shorten: the warning below still names the loss
  }
  failed_writes_.push_back(file + ": " + why);
  // One write per message: std::cerr is unbuffered, and piecewise writes
  // interleave with standard output in a launcher's merged log.
  std::ostringstream m;
  m << "ftrain: warning: rank " << rank_ << ": cannot write " << file << ": " << why
    << "; nothing more goes to it, training continues, and ftrain will exit with status 1\n";
  std::cerr << m.str() << std::flush;
}

}  // namespace ftrain
