#include "train/output_locations.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

#include "base/error.hpp"
#include "train/host_identity.hpp"

namespace ftrain {

namespace fs = std::filesystem;

namespace {

std::string named(const OutputLocation& o) {
  std::string s = o.where.file.empty() ? "" : o.where.str() + ": ";
  s += o.what + " '" + o.dir + "'";
  if (o.where.file.empty()) s += " (the default; set it with `" + o.what + " PATH` in the deck)";
  return s;
}

// Empty when a small file can be created, written and removed in `dir`;
// otherwise the reason. The name is unique per process, so ranks sharing a
// directory never collide.
std::string try_write_in(const fs::path& dir) {
  const fs::path probe = dir / (".ftrain_write_test." + host_name() + "." + std::to_string(getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return std::strerror(errno);
  // One block's worth: a full filesystem refuses data even where it still
  // has an inode for an empty file.
  const std::string block(4096, 'x');
  std::string why;
  if (::write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size()))
    why = errno != 0 ? std::strerror(errno) : "short write";
  else if (::fsync(fd) != 0 && errno != EINVAL)
    why = std::strerror(errno);
  if (::close(fd) != 0 && why.empty()) why = std::strerror(errno);
  ::unlink(probe.c_str());
  return why;
}

}  // namespace

std::vector<OutputLocation> output_locations(const RunConfig& c) {
  std::vector<OutputLocation> out;
  out.push_back({"run_dir", c.run_dir, c.run_dir_where});
  if (!c.checkpoint.dir.empty()) out.push_back({"checkpoint dir", c.checkpoint.dir, c.checkpoint.where});
  if (!c.save_final.path.empty()) {
    const fs::path parent = fs::path(c.save_final.path).parent_path();
    out.push_back({"save_final directory", parent.empty() ? "." : parent.string(), c.save_final.where});
  }
  return out;
}

void check_output_locations(const std::vector<OutputLocation>& locations, bool create) {
  for (const auto& o : locations) {
    std::error_code ec;
    fs::path dir = o.dir.empty() ? fs::path(".") : fs::path(o.dir);
    if (create) {
      fs::create_directories(dir, ec);
      if (ec) FT_USER_ERROR() << named(o) << ": cannot create the directory: " << ec.message();
      if (!fs::is_directory(dir, ec)) FT_USER_ERROR() << named(o) << ": exists and is not a directory";
    } else {
      // The nearest ancestor that exists is where creation would start.
      dir = fs::absolute(dir, ec).lexically_normal();
      while (!fs::exists(dir, ec) && dir.has_parent_path() && dir.parent_path() != dir) dir = dir.parent_path();
      if (!fs::is_directory(dir, ec))
        FT_USER_ERROR() << named(o) << ": cannot be created: " << dir.string() << " is not a directory";
    }
    const std::string why = try_write_in(dir);
    if (!why.empty())
      FT_USER_ERROR() << named(o) << ": cannot write in " << dir.string() << ": " << why;
  }
}

}  // namespace ftrain
