// Which instructions get which patch function, per patch set, and the bookkeeping that makes
// each module patched exactly once (the sanitizer's patching calls must be serialised).
#pragma once

#include <sanitizer.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "diagnostics.h"
#include "gpuobs/kernel_filter.h"
#include "gpuobs/layout.h"

namespace gpuobs {

class Patcher {
 public:
  // block_exit: also hook block exits (exit events; costly, see README). diagnostics: the
  // measurement-only patches a bench build may choose instead (diagnostics.h). memory_kernels
  // (GPUOBS_MEMORY_KERNELS, nullptr for none): in the block set, a module holding a kernel it
  // matches gets the access hooks as well.
  Patcher(PatchSet set, bool block_exit, const DiagnosticPatches& diagnostics,
          std::shared_ptr<const KernelFilter> memory_kernels)
      : set_(set), block_exit_(block_exit), diagnostics_(diagnostics), memory_kernels_(std::move(memory_kernels)) {}

  // Loads the patch fatbin into `context`. False with a reason (wrong architecture, missing file).
  bool load_patches(CUcontext context, const std::string& patch_file, std::string* error);
  // Patches `module` once with the current set; `cubin` is its image, whose function names say
  // whether GPUOBS_MEMORY_KERNELS chose it (when they cannot be read, *note says why and it is
  // not chosen). False with a reason when it cannot be patched (the module then runs unpatched;
  // its launches count as unpatched).
  bool patch_module(CUcontext context, CUmodule module, const void* cubin, size_t cubin_bytes, std::string* error,
                    std::string* note);
  bool is_patched(CUmodule module);
  // The module was patched with the access hooks: by the memory set, or chosen in the block set.
  bool hooks_accesses(CUmodule module);
  // GPUOBS_MEMORY_KERNELS chose the module (whatever the set in force).
  bool chosen(CUmodule module);
  bool chooses_modules() const { return memory_kernels_ != nullptr; }
  void forget(CUmodule module);
  // Re-patches every module with `set` (from the tool thread, never inside a launch callback).
  bool switch_set(PatchSet set, std::string* error);
  PatchSet set() const { return set_; }

 private:
  struct Module {
    bool patched = false;
    bool chosen = false;  // GPUOBS_MEMORY_KERNELS matched one of its functions
  };
  // caller holds mutex_; `accesses`: with the access hooks
  bool apply(CUmodule module, bool accesses, std::string* error);

  std::mutex mutex_;
  PatchSet set_;
  bool block_exit_;
  DiagnosticPatches diagnostics_;
  std::shared_ptr<const KernelFilter> memory_kernels_;
  std::unordered_set<CUcontext> contexts_with_patches_;
  std::unordered_map<CUmodule, Module> modules_;
};

}  // namespace gpuobs
