// Where a run's text goes: rank 0's standard output (with the progress line
// for a person at a terminal, train/console.hpp), each rank's own log when
// the deck asks for one, and rank 0's metrics.jsonl.
//
// Every write is checked. A failed one (full disk, quota, I/O error) is
// reported loudly once per file; training goes on, because the checkpoints
// are what a bad output disk must not cost, and the run then ends with exit
// status 1 (finish()).
#pragma once

#include <cstdint>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "train/console.hpp"

namespace ftrain {

// h:mm:ss, or "?" for a time that is not one.
std::string format_duration(double seconds);

class RunOutput {
 public:
  explicit RunOutput(int rank) : rank_(rank) {}

  bool is_root() const { return rank_ == 0; }
  void set_progress_line(const ProgressDecision& decision) { progress_line_ = decision; }
  const ProgressDecision& progress_line() const { return progress_line_; }

  // Rank 0 prints; every rank also writes its own log file when it has one.
  void say(const std::string& text);
  // The rank's own log only.
  void say_rank(const std::string& text);
  // Rank 0, at a terminal only: one line updated in place between log lines.
  void progress(std::int64_t done, std::int64_t total, double eta_seconds);
  // A stop every rank reached together (the decision came from all-reduced
  // values): rank 0 prints the message once, nothing aborts, and the exit
  // status says it failed. Returns 1.
  int stop_with_error(const std::string& message);
  // The exit status of a run that got this far: `code`, or 1 when an output
  // file lost writes (said again at the end, where it is seen).
  int finish(int code);

  // Opens RUN_DIR/rank_R.log (deck `per_rank_logs`); a UserError when it cannot.
  void open_rank_log(const std::string& path);
  // Rank 0: starts metrics.jsonl afresh with `kept` (the rows a resume keeps).
  void open_metrics(const std::string& path, const std::string& kept);
  // One or more whole rows of metrics.jsonl (rank 0).
  void write_metrics(const std::string& rows) { write(metrics_, metrics_path_, rows); }

 private:
  void write(std::ostream& out, const std::string& file, const std::string& text);

  int rank_;
  ProgressDecision progress_line_;
  bool progress_shown_ = false;
  std::ofstream metrics_, rank_log_;
  std::string metrics_path_, rank_log_path_;
  std::vector<std::string> failed_writes_;  // "FILE: reason", first failure of each file
};

}  // namespace ftrain
