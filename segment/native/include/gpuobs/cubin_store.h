// Module cubins kept at load, so that a PC can be symbolised after the fact and from another
// process: one file per distinct cubin, named by a hash of its bytes (so processes that load
// the same library share the file), in a directory beside the segments, within a disk budget
// per process. Used by the injector and by gpuobs-synth.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "gpuobs/trusted_dir.h"

namespace gpuobs {

// 64-bit FNV-1a of the bytes, mixed with their count; never 0 (0 means "not kept").
uint64_t cubin_hash(const void* bytes, size_t size);
// "<hash as 16 hex digits>.cubin"
std::string cubin_file_name(uint64_t hash);

// Where a producer keeps cubins when GPUOBS_CUBIN_DIR names none: under its user's own cache
// directory ($XDG_CACHE_HOME, else $HOME/.cache: gpuobs/cubins), a name no other user can take
// (the segment directory, /dev/shm, is everyone's). "" when the environment names neither.
std::string default_cubin_directory();

class CubinStore {
 public:
  // budget_bytes: what this process may add to the directory; 0 keeps nothing. group: the group
  // the files (and a directory it creates) get, gid_t(-1) for none. make_parents: create the
  // directories above it too (the default directory's, under the user's own home).
  CubinStore(std::string directory, uint64_t budget_bytes, gid_t group = gid_t(-1), bool make_parents = false);

  // Keeps the cubin of `module` (deduplicated by hash) and remembers module -> hash. Returns
  // the hash, or 0 when it was not kept (the reason in *why). The directory is opened (created)
  // at the first cubin and checked as every shared place is (trusted_dir.h): a link, another
  // user's directory or one others may write in without the sticky bit keeps nothing. Never
  // writes through a link or into a file that is there. Never throws.
  uint64_t keep(uint64_t module, const void* bytes, size_t size, std::string* why);
  // The hash kept for a module, 0 when none.
  uint64_t hash_of(uint64_t module) const;
  void forget(uint64_t module);
  const std::string& directory() const { return directory_; }

 private:
  std::string directory_;
  uint64_t budget_bytes_;
  gid_t group_;
  bool make_parents_;
  uint64_t written_bytes_ = 0;
  mutable std::mutex mutex_;
  std::unique_ptr<TrustedDir> opened_;  // at the first cubin
  std::string refused_;                 // why the directory cannot be used, once found
  std::unordered_map<uint64_t, uint64_t> module_hash_;
};

}  // namespace gpuobs
