#include "patcher.h"

#include <cstring>
#include <vector>

#include "gpuobs/cubin_functions.h"
#include "gpuobs/producer.h"

namespace gpuobs {
namespace {

struct Hook {
  Sanitizer_InstructionId instruction;
  const char* function;
  bool required;  // a failure on an optional hook (not on every architecture) is tolerated
};

const Hook kBlockHooks[] = {
    {SANITIZER_INSTRUCTION_BLOCK_ENTER, "gpuobs_block_enter", true},
    {SANITIZER_INSTRUCTION_BLOCK_EXIT, "gpuobs_block_exit", true},
};
const Hook kMemoryHooks[] = {
    {SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, "gpuobs_memory_access", true},
    {SANITIZER_INSTRUCTION_BULK_COPY_GLOBAL_TO_SHARED, "gpuobs_bulk_global_to_shared", false},
    {SANITIZER_INSTRUCTION_BULK_COPY_SHARED_TO_GLOBAL, "gpuobs_bulk_shared_to_global", false},
};

}  // namespace

bool Patcher::load_patches(CUcontext context, const std::string& patch_file, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (contexts_with_patches_.count(context)) return true;
  if (sanitizerAddPatchesFromFile(patch_file.c_str(), context) != SANITIZER_SUCCESS) {
    *error = "cannot load patches from " + patch_file + " (missing, or not built for this GPU)";
    return false;
  }
  contexts_with_patches_.insert(context);
  return true;
}

bool Patcher::apply(CUmodule module, bool accesses, std::string* error) {
  // Diagnostics (a bench build only): other patches on the same instructions (diagnostics.h).
  for (const Hook& hook : kBlockHooks) {
    if ((diagnostics_.enter_only || !block_exit_) && hook.instruction == SANITIZER_INSTRUCTION_BLOCK_EXIT) continue;
    const char* function = diagnostics_.block_function ? diagnostics_.block_function : hook.function;
    if (sanitizerPatchInstructions(hook.instruction, module, function) != SANITIZER_SUCCESS && hook.required) {
      *error = std::string("cannot patch ") + function;
      return false;
    }
  }
  if (accesses) {
    for (const Hook& hook : kMemoryHooks) {
      const char* function = hook.function;
      if (diagnostics_.access_function && hook.instruction == SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS)
        function = diagnostics_.access_function;
      if (sanitizerPatchInstructions(hook.instruction, module, function) != SANITIZER_SUCCESS && hook.required) {
        *error = std::string("cannot patch ") + function;
        return false;
      }
    }
  }
  if (sanitizerPatchModule(module) != SANITIZER_SUCCESS) {
    *error = "sanitizerPatchModule failed";
    return false;
  }
  return true;
}

bool Patcher::patch_module(CUcontext context, CUmodule module, const void* cubin, size_t cubin_bytes,
                           std::string* error, std::string* note) {
  // The names are read and judged before the lock: a module load on another thread need not
  // wait for this one's pattern search.
  bool chosen = false;
  if (memory_kernels_) {
    std::string unreadable;
    const std::vector<std::string> names = cubin_function_names(cubin, cubin_bytes, &unreadable);
    if (!unreadable.empty()) *note = "a module's function names could not be read (" + unreadable + ")";
    chosen = module_chosen_for_access_hooks(*memory_kernels_, names);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = modules_.find(module);
  if (found != modules_.end()) return found->second.patched;
  Module& state = modules_[module];
  state.chosen = chosen;
  if (!contexts_with_patches_.count(context)) {
    *error = "no patches loaded in this context";
    return false;
  }
  state.patched = apply(module, set_ == PatchSet::Memory || chosen, error);
  return state.patched;
}

bool Patcher::is_patched(CUmodule module) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = modules_.find(module);
  return found != modules_.end() && found->second.patched;
}

bool Patcher::hooks_accesses(CUmodule module) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = modules_.find(module);
  return found != modules_.end() && found->second.patched && (set_ == PatchSet::Memory || found->second.chosen);
}

bool Patcher::chosen(CUmodule module) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = modules_.find(module);
  return found != modules_.end() && found->second.chosen;
}

void Patcher::forget(CUmodule module) {
  std::lock_guard<std::mutex> lock(mutex_);
  modules_.erase(module);
}

bool Patcher::switch_set(PatchSet set, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (set == set_) return true;
  bool all = true;
  for (auto& [module, state] : modules_) {
    if (!state.patched) continue;
    if (sanitizerUnpatchModule(module) != SANITIZER_SUCCESS) {
      *error = "sanitizerUnpatchModule failed";
      all = false;
      continue;
    }
    std::string problem;
    state.patched = apply(module, set == PatchSet::Memory || state.chosen, &problem);
    if (!state.patched) {
      *error = problem;
      all = false;
    }
  }
  set_ = set;
  return all;
}

}  // namespace gpuobs
