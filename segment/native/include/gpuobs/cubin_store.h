// Module cubins kept at load, so that a PC can be symbolised after the fact and from another
// process: one file per distinct cubin, named by a hash of its bytes (so processes that load
// the same library share the file), in a directory beside the segments, within a disk budget
// per process. Used by the injector and by gpuobs-synth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace gpuobs {

// 64-bit FNV-1a of the bytes, mixed with their count; never 0 (0 means "not kept").
uint64_t cubin_hash(const void* bytes, size_t size);
// "<hash as 16 hex digits>.cubin"
std::string cubin_file_name(uint64_t hash);

class CubinStore {
 public:
  // budget_bytes: what this process may add to the directory; 0 keeps nothing.
  CubinStore(std::string directory, uint64_t budget_bytes);

  // Keeps the cubin of `module` (deduplicated by hash) and remembers module -> hash. Returns
  // the hash, or 0 when it was not kept (the reason in *why). Never throws.
  uint64_t keep(uint64_t module, const void* bytes, size_t size, std::string* why);
  // The hash kept for a module, 0 when none.
  uint64_t hash_of(uint64_t module) const;
  void forget(uint64_t module);
  const std::string& directory() const { return directory_; }

 private:
  std::string directory_;
  uint64_t budget_bytes_;
  uint64_t written_bytes_ = 0;
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, uint64_t> module_hash_;
};

}  // namespace gpuobs
