// One owner per run directory (issue 35).
//
// Two runs writing one run_dir (or one checkpoint dir shared by two decks)
// interleave metrics.jsonl, overwrite each other's checkpoints and both
// report success. Rank 0 of a run therefore holds an exclusive lock on
// DIR/.ftrain.lock for the run's whole lifetime; a second run's rank 0 fails
// to take it and the second run stops before step 1, naming the host, pid
// and start time of the run that holds it (the lock file's body).
//
// The lock is a POSIX record lock (fcntl F_SETLK): unlike flock(), it is
// carried to the server by NFS (v3 through lockd, v4 natively), and Lustre
// (mounted with `flock`) and GPFS honour it across nodes. The kernel (or the
// lock server) releases it when the holding process dies, however it dies:
// there is no stale lock to clean up by hand after a crash. A lock file whose
// lock nobody holds is a leftover of a run that ended (or crashed); it is
// taken over and the takeover is reported (a clean end empties the record,
// so only a crash or a kill leaves one). The file is never deleted:
// unlinking a lock file lets two later runs lock two different inodes.
//
// POSIX record locks belong to the process and are dropped when it closes
// ANY descriptor of the file: nothing else in ftrain opens .ftrain.lock.
#pragma once

#include <string>
#include <vector>

#include "train/output_locations.hpp"

namespace ftrain {

inline constexpr const char* kRunLockName = ".ftrain.lock";

class DirectoryLock {
 public:
  DirectoryLock() = default;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  ~DirectoryLock();  // empties the owner record and releases the lock

  // Takes DIR/.ftrain.lock for this process and writes its owner record.
  // Throws UserError naming `what` and the deck line when another live
  // process holds it (with that process's host, pid and start time).
  // `notice` receives a line when a leftover of an ended run was taken over,
  // or when the file system does not support record locks (the run goes on
  // unlocked, and says so).
  static DirectoryLock acquire(const OutputLocation& location, std::string* notice);

  const std::string& path() const { return path_; }

 private:
  void release();

  int fd_ = -1;
  bool held_ = false;  // false where the file system refused record locks
  std::string path_;
};

// Locks every distinct directory among run_dir and the checkpoint dir (the
// same directory is locked once). Called by rank 0 only, after the
// directories were created; the caller reports failure through the usual
// start-up agreement, so every rank stops with the same message.
std::vector<DirectoryLock> lock_run_directories(const std::vector<OutputLocation>& locations,
                                                std::vector<std::string>* notices);

}  // namespace ftrain
