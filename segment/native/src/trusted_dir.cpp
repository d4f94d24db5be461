#include "gpuobs/trusted_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

namespace gpuobs {
namespace {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// A name no other writer of this directory chooses: the pid and 64 random bits.
std::string temporary_name(const std::string& name) {
  std::random_device entropy;
  const uint64_t random = (uint64_t(entropy()) << 32) ^ entropy();
  return "." + name + "." + std::to_string(::getpid()) + "." + std::to_string(random) + ".tmp";
}

}  // namespace

std::string untrusted_directory_problem(int fd) {
  struct stat status{};
  if (::fstat(fd, &status) != 0) return errno_text("cannot stat it");
  if (!S_ISDIR(status.st_mode)) return "not a directory";
  if (status.st_uid != ::geteuid() && status.st_uid != 0)
    return "owned by uid " + std::to_string(status.st_uid) + ", neither this user nor root";
  if ((status.st_mode & (S_IWGRP | S_IWOTH)) && !(status.st_mode & S_ISVTX))
    return "writable by other users without the sticky bit (they could replace what is written there)";
  return "";
}

std::unique_ptr<TrustedDir> TrustedDir::open(const std::string& path, bool create, mode_t mode, std::string* why) {
  if (path.empty()) {
    *why = "no directory named";
    return nullptr;
  }
  if (create && ::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    *why = errno_text("cannot create " + path);
    return nullptr;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    struct stat link{};
    const bool is_link =
        (errno == ELOOP || errno == ENOTDIR) && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
    *why = is_link ? path + " is a symbolic link: not followed" : errno_text("cannot open " + path);
    return nullptr;
  }
  const std::string problem = untrusted_directory_problem(fd);
  if (!problem.empty()) {
    ::close(fd);
    *why = path + " is " + problem;
    return nullptr;
  }
  return std::unique_ptr<TrustedDir>(new TrustedDir(fd, path));
}

TrustedDir::~TrustedDir() { ::close(fd_); }

bool TrustedDir::write_file(const std::string& name, const void* bytes, size_t size, mode_t mode, gid_t group,
                            bool replace, std::string* why) const {
  const std::string temporary = temporary_name(name);
  const int fd = ::openat(fd_, temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    *why = errno_text("cannot create a file in " + path_);
    return false;
  }
  const auto* data = static_cast<const char*>(bytes);
  size_t done = 0;
  while (done < size) {
    const ssize_t wrote = ::write(fd, data + done, size - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) break;
    done += size_t(wrote);
  }
  bool ok = done == size;
  if (ok && group != gid_t(-1) && ::fchown(fd, uid_t(-1), group) != 0) ok = false;
  if (ok && ::fchmod(fd, mode) != 0) ok = false;
  if (::close(fd) != 0) ok = false;
  if (ok) {
    // renameat replaces a name (a link there is replaced, never followed); linkat refuses one
    ok = replace ? ::renameat(fd_, temporary.c_str(), fd_, name.c_str()) == 0
                 : ::linkat(fd_, temporary.c_str(), fd_, name.c_str(), 0) == 0;
  }
  if (!ok) *why = errno_text("writing " + path_ + "/" + name + " failed");
  ::unlinkat(fd_, temporary.c_str(), 0);  // gone after a rename; the second name after a link
  return ok;
}

int64_t TrustedDir::own_file_size(const std::string& name) const {
  struct stat status{};
  if (::fstatat(fd_, name.c_str(), &status, AT_SYMLINK_NOFOLLOW) != 0) return -1;
  if (!S_ISREG(status.st_mode) || status.st_uid != ::geteuid()) return -1;
  return int64_t(status.st_size);
}

}  // namespace gpuobs
