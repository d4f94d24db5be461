#include "gpuobs/cubin_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gpuobs {

uint64_t cubin_hash(const void* bytes, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  const auto* data = static_cast<const unsigned char*>(bytes);
  for (size_t index = 0; index < size; ++index) {
    hash ^= data[index];
    hash *= 0x100000001b3ULL;
  }
  hash ^= uint64_t(size) * 0x9e3779b97f4a7c15ULL;
  return hash == 0 ? 1 : hash;
}

std::string cubin_file_name(uint64_t hash) {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.cubin", static_cast<unsigned long long>(hash));
  return name;
}

CubinStore::CubinStore(std::string directory, uint64_t budget_bytes)
    : directory_(std::move(directory)), budget_bytes_(budget_bytes) {}

uint64_t CubinStore::keep(uint64_t module, const void* bytes, size_t size, std::string* why) {
  if (bytes == nullptr || size == 0) {
    *why = "the driver handed over no cubin";
    return 0;
  }
  const uint64_t hash = cubin_hash(bytes, size);
  const std::string path = directory_ + "/" + cubin_file_name(hash);
  std::lock_guard<std::mutex> lock(mutex_);
  struct stat existing {};
  if (::stat(path.c_str(), &existing) == 0 && uint64_t(existing.st_size) == size) {
    module_hash_[module] = hash;  // another process (or an earlier load) kept it already
    return hash;
  }
  if (written_bytes_ + size > budget_bytes_) {
    *why = "over the cubin disk budget (GPUOBS_CUBIN_MB)";
    return 0;
  }
  if (::mkdir(directory_.c_str(), 0750) != 0 && errno != EEXIST) {
    *why = "cannot create " + directory_ + ": " + std::strerror(errno);
    return 0;
  }
  // Written under a name of its own, then renamed: a reader never sees half a cubin.
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) {
    *why = "cannot write " + temporary + ": " + std::strerror(errno);
    return 0;
  }
  const auto* data = static_cast<const char*>(bytes);
  size_t done = 0;
  while (done < size) {
    const ssize_t wrote = ::write(fd, data + done, size - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) break;
    done += size_t(wrote);
  }
  const bool complete = done == size && ::close(fd) == 0;
  if (done != size) ::close(fd);
  if (!complete || ::rename(temporary.c_str(), path.c_str()) != 0) {
    *why = "writing " + path + " failed";
    ::unlink(temporary.c_str());
    return 0;
  }
  written_bytes_ += size;
  module_hash_[module] = hash;
  return hash;
}

uint64_t CubinStore::hash_of(uint64_t module) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = module_hash_.find(module);
  return found == module_hash_.end() ? 0 : found->second;
}

void CubinStore::forget(uint64_t module) {
  std::lock_guard<std::mutex> lock(mutex_);
  module_hash_.erase(module);
}

}  // namespace gpuobs
