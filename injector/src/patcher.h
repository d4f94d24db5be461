// Which instructions get which patch function, per patch set, and the bookkeeping that makes
// each module patched exactly once (the sanitizer's patching calls must be serialised).
#pragma once

#include <sanitizer.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "gpuobs/layout.h"

namespace gpuobs {

class Patcher {
 public:
  // block_exit: also hook block exits (exit events; costly, see README). naive_counting: the
  // memory set's access hook is the naive two-atomic count (benchmarks).
  Patcher(PatchSet set, bool block_exit, bool naive_counting)
      : set_(set), block_exit_(block_exit), naive_counting_(naive_counting) {}

  // Loads the patch fatbin into `context`. False with a reason (wrong architecture, missing file).
  bool load_patches(CUcontext context, const std::string& patch_file, std::string* error);
  // Patches `module` once with the current set. False with a reason when it cannot be patched
  // (the module then runs unpatched; its launches count as unpatched).
  bool patch_module(CUcontext context, CUmodule module, std::string* error);
  bool is_patched(CUmodule module);
  void forget(CUmodule module);
  // Re-patches every module with `set` (from the tool thread, never inside a launch callback).
  bool switch_set(PatchSet set, std::string* error);
  PatchSet set() const { return set_; }

 private:
  bool apply(CUmodule module, PatchSet set, std::string* error);  // caller holds mutex_

  std::mutex mutex_;
  PatchSet set_;
  bool block_exit_;
  bool naive_counting_;
  std::unordered_set<CUcontext> contexts_with_patches_;
  std::unordered_map<CUmodule, bool> modules_;  // module -> patched
};

}  // namespace gpuobs
