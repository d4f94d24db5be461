// Files a producer writes in a directory it may share with other users (the segment directory,
// /dev/shm by default; the cubin directory): whatever another local user put there, nothing is
// written through a link or over a file, and nothing is written in a directory where another
// user could replace what is written. Used inside the served process: no exceptions, errors as
// reasons.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace gpuobs {

// Why the directory open as `fd` is not one this process may write in ("" when it is): it must be
// a directory owned by this process's user or by root, and no other user may remove or rename
// what is in it (not writable by its group or others, unless it is sticky: then only an entry's
// owner may remove it).
std::string untrusted_directory_problem(int fd);

class TrustedDir {
 public:
  // The directory at `path`, opened without following a link at its last component and checked
  // (untrusted_directory_problem); created first with `mode` when missing and `create` is set.
  // nullptr and the reason in *why otherwise.
  static std::unique_ptr<TrustedDir> open(const std::string& path, bool create, mode_t mode, std::string* why);
  ~TrustedDir();
  TrustedDir(const TrustedDir&) = delete;
  TrustedDir& operator=(const TrustedDir&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

  // A new file named `name` holding `bytes`, written whole or not at all: a temporary created
  // exclusively (never through a link), then renamed into place, so a reader never sees half of
  // it. `replace`: a file already named so is replaced as a name (never written into); otherwise
  // it is kept and false returned. Mode `mode`; group `group` unless it is gid_t(-1).
  bool write_file(const std::string& name, const void* bytes, size_t size, mode_t mode, gid_t group, bool replace,
                  std::string* why) const;
  // The size of `name` when it is a regular file (not a link) owned by this process's user; -1
  // otherwise (missing, a link, another user's: not to be trusted as ours).
  int64_t own_file_size(const std::string& name) const;

 private:
  TrustedDir(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace gpuobs
