#include "gpuobs/cubin_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
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

std::string default_cubin_directory() {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  if (cache && cache[0] == '/') return std::string(cache) + "/gpuobs/cubins";
  const char* home = std::getenv("HOME");
  if (home && home[0] == '/' && std::strcmp(home, "/") != 0) return std::string(home) + "/.cache/gpuobs/cubins";
  return "";
}

CubinStore::CubinStore(std::string directory, uint64_t budget_bytes, gid_t group, bool make_parents)
    : directory_(std::move(directory)), budget_bytes_(budget_bytes), group_(group), make_parents_(make_parents) {}

namespace {

// mkdir -p of the directories above `path` (0700: the user's own cache), each checked when it
// is opened for the last one; errors show when the last one is opened.
void make_parent_directories(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1))
    ::mkdir(path.substr(0, slash).c_str(), 0700);
}

}  // namespace

uint64_t CubinStore::keep(uint64_t module, const void* bytes, size_t size, std::string* why) {
  if (bytes == nullptr || size == 0) {
    *why = "the driver handed over no cubin";
    return 0;
  }
  if (budget_bytes_ == 0) {
    *why = "GPUOBS_CUBIN_MB is 0: no cubin is kept";
    return 0;
  }
  const uint64_t hash = cubin_hash(bytes, size);
  const std::string name = cubin_file_name(hash);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!refused_.empty()) {
    *why = refused_;
    return 0;
  }
  if (!opened_) {
    if (directory_.empty()) {
      refused_ = "no cubin directory: GPUOBS_CUBIN_DIR unset and neither XDG_CACHE_HOME nor HOME";
    } else {
      if (make_parents_) make_parent_directories(directory_);
      std::string problem;
      opened_ = TrustedDir::open(directory_, true, group_ != gid_t(-1) ? 0750 : 0700, &problem);
      if (!opened_) refused_ = "cubin directory refused: " + problem;
    }
    if (!opened_) {
      *why = refused_;
      return 0;
    }
  }
  if (opened_->own_file_size(name) == int64_t(size)) {
    module_hash_[module] = hash;  // an earlier process of this user (or an earlier load) kept it
    return hash;
  }
  if (written_bytes_ + size > budget_bytes_) {
    *why = "over the cubin disk budget (GPUOBS_CUBIN_MB)";
    return 0;
  }
  if (!opened_->write_file(name, bytes, size, 0640, group_, true, why)) return 0;
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
