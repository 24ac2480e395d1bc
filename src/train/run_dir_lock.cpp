// One owner per run directory (see run_dir_lock.hpp).
#include "train/run_dir_lock.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>
#include <string>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "train/host_identity.hpp"

namespace ftrain {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string named(const OutputLocation& o) {
  std::string s = o.where.file.empty() ? "" : o.where.str() + ": ";
  return s + o.what + " '" + o.dir + "'";
}

// The whole lock file (small): the owner record of the run that wrote it last.
std::string read_all(int fd) {
  std::string text;
  char buf[1024];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
    if (text.size() > 64 * 1024) break;  // not ours: say so rather than read on
  }
  return text;
}

// "host H pid P, started T (deck D)" from an owner record, in printable text
// whatever the file holds (it may be a torn write or not ours at all).
std::string describe_owner(const std::string& record) {
  json j;
  try {
    j = json::parse(record);
  } catch (const std::exception&) {
    return record.empty() ? "owner not recorded yet" : "owner record unreadable";
  }
  if (!j.is_object()) return "owner record unreadable";
  auto field = [&](const char* key) -> std::string {
    if (!j.contains(key)) return "?";
    const json& v = j[key];
    return v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', true, json::error_handler_t::replace);
  };
  return "host " + field("host") + " pid " + field("pid") + ", started " + field("started") + " (deck " +
         field("deck") + ")";
}

}  // namespace

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), held_(std::exchange(other.held_, false)), path_(std::move(other.path_)) {}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    held_ = std::exchange(other.held_, false);
    path_ = std::move(other.path_);
  }
  return *this;
}

DirectoryLock::~DirectoryLock() { release(); }

void DirectoryLock::release() {
  if (fd_ < 0) return;
  // A clean end empties the owner record: a record found with no holder is
  // then always a run that crashed or was killed, worth a notice.
  if (held_ && ::ftruncate(fd_, 0) != 0) {
    // nothing to do: the next run reports a takeover, which is harmless
  }
  ::close(fd_);
  fd_ = -1;
  held_ = false;
}

DirectoryLock DirectoryLock::acquire(const OutputLocation& location, std::string* notice) {
  DirectoryLock lock;
  const fs::path dir = location.dir.empty() ? fs::path(".") : fs::path(location.dir);
  lock.path_ = (dir / kRunLockName).string();
  // O_CLOEXEC: a child (a plugin's helper, MPI's spawn) must not carry the
  // descriptor; record locks are not inherited anyway.
  lock.fd_ = ::open(lock.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock.fd_ < 0)
    FT_USER_ERROR() << named(location) << ": cannot open its lock file " << lock.path_ << ": " << std::strerror(errno);
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  whole.l_start = 0;
  whole.l_len = 0;  // the whole file, however long
  if (::fcntl(lock.fd_, F_SETLK, &whole) != 0) {
    const int err = errno;
    if (err == EACCES || err == EAGAIN) {
      const std::string owner = describe_owner(read_all(lock.fd_));
      FT_USER_ERROR() << named(location) << " is in use by another ftrain run: " << owner << "; it holds "
                      << lock.path_
                      << ". Two runs in one directory overwrite each other's metrics and checkpoints: wait for "
                         "that run to end (or stop it), or give this run another directory. The lock is released "
                         "when that process ends, even by a crash or kill -9, so a lock that is still held means "
                         "the process is alive (look for leftover ranks of an earlier job)";
    }
    // ENOLCK / ENOSYS / EOPNOTSUPP: the file system does not do record locks
    // (Lustre mounted without `flock`, an NFS without lockd). The run goes
    // on unprotected rather than not at all, and says so.
    if (notice != nullptr)
      *notice = named(location) + ": cannot lock " + lock.path_ + " (" + std::strerror(err) +
                "): this file system does not support POSIX record locks, so a second run in the same directory "
                "would not be refused (Lustre: mount with -o flock; NFS: run lockd or use NFSv4)";
    return lock;
  }
  lock.held_ = true;
  // A record left by a run that no longer holds the lock: it crashed or was
  // killed (a clean end empties the record).
  const std::string previous = read_all(lock.fd_);
  if (!previous.empty() && notice != nullptr)
    *notice = named(location) + ": taking over " + lock.path_ + " from an earlier run that no longer holds it (" +
              describe_owner(previous) + "; it crashed or was killed)";
  const json record{{"host", host_name()},
                    {"pid", static_cast<long long>(::getpid())},
                    {"started", utc_timestamp()},
                    {"directory", location.what},
                    {"deck", location.where.file.empty() ? std::string("-") : location.where.file}};
  const std::string text = record.dump(-1, ' ', true, json::error_handler_t::replace) + "\n";
  // Truncate and write in place: the file (the inode the lock is on) stays.
  if (::ftruncate(lock.fd_, 0) != 0 || ::pwrite(lock.fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    FT_USER_ERROR() << named(location) << ": cannot write its lock file " << lock.path_ << ": " << std::strerror(errno);
  return lock;
}

std::vector<DirectoryLock> lock_run_directories(const std::vector<OutputLocation>& locations,
                                                std::vector<std::string>* notices) {
  std::vector<DirectoryLock> locks;
  std::set<fs::path> done;
  for (const auto& o : locations) {
    if (o.what != "run_dir" && o.what != "checkpoint dir") continue;
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(o.dir.empty() ? fs::path(".") : fs::path(o.dir), ec);
    if (ec) canonical = fs::absolute(o.dir, ec).lexically_normal();
    if (!done.insert(canonical).second) continue;  // run_dir == checkpoint dir: one lock
    std::string notice;
    locks.push_back(DirectoryLock::acquire(o, &notice));
    if (!notice.empty() && notices != nullptr) notices->push_back(notice);
  }
  return locks;
}

}  // namespace ftrain
