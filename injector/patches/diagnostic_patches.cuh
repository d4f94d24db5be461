// Diagnostic patches, for the overhead benchmarks only: compiled into the fatbin by a bench build
// (cmake -DGPUOBS_BENCH_TOOLS=ON defines GPUOBS_DIAGNOSTICS) and chosen by the injector's
// diagnostics.h. Included at the end of gpuobs_patches.cu, whose helpers they use.
#pragma once

// The naive exact count, for comparison only (GPUOBS_NAIVE_COUNTING=1 with the memory set):
// two atomics per access on two words shared by the whole kernel. Exact, and a queue on one
// address for a streaming kernel; the benchmarks measure what the warp-aggregated, sharded
// count above saves, and the GPU suite checks that both give the same counts.
extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_memory_access_naive(void* userdata, uint64_t pc,
                                                                                   void* ptr, uint32_t access_bytes,
                                                                                   uint32_t flags,
                                                                                   const void* new_value) {
  if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
  if (flags_mode(flags_of(userdata)) < uint32_t(Mode::Memory)) return SANITIZER_PATCH_SUCCESS;
  DeviceKernelSlot* kernel = kernel_of(userdata);
  ring::add(&kernel->accesses[0], 1ULL);
  ring::add(&kernel->reserved[0], uint64_t(access_bytes));
  return SANITIZER_PATCH_SUCCESS;
}

// Diagnostics only (GPUOBS_DEBUG_PATCHES=empty): patches that return at once, to measure what
// the instrumentation itself costs on a kernel, apart from anything gpuobs does in it.
extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_empty_block(void* userdata, uint64_t pc) {
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_empty_access(void* userdata, uint64_t pc, void* ptr,
                                                                            uint32_t access_bytes, uint32_t flags,
                                                                            const void* new_value) {
  return SANITIZER_PATCH_SUCCESS;
}

// Diagnostics only (GPUOBS_DEBUG_PATCHES=<step>): block-entry patches that do one part of a
// leader's work each, so that one benchmark run prices each part on a graph of small kernels,
// where the block set costs most over the empty patch. All but `count_inline` contain a call
// that never happens, so that every thread pays the 16-byte frame the production patch pays:
//   leader:       the leader test alone (and the frame);
//   load:         + the kernel slot's config word (one load, kept by a branch that never calls);
//   load_context: + the context's config word instead, its address computed from the userdata
//                 (slot_userdata: no chain of loads), as the production patch reads its mode;
//   red:          the leader test and the block's count (a reduction), no load;
//   count:        load + count, what every block but the first does in `counter`;
//   count_inline: load + count with no call anywhere, so no frame for any thread;
//   tid_inline:   only the leader test's inputs (the thread index, read and kept), no branch,
//                 no memory, no call: what a patch costs once it does anything at all;
//   red_inline:   the leader test and the block's count, no load, no call;
//   census:       only block (0,0,0)'s launch census (no load).
// The counts these leave are wrong by design: for the overhead benchmark, never for a service.
namespace {
__device__ __noinline__ void never_called(DeviceKernelSlot* kernel) { ring::add(&kernel->reserved[1], 1ULL); }
}  // namespace

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_leader(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  if (pc == 0) never_called(kernel_of(userdata));
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_load(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  if (flags_of(userdata) == ~0u) never_called(kernel_of(userdata));
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_load_context(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  const uint64_t bits = reinterpret_cast<uint64_t>(userdata);
  const DeviceContextState* context = context_of_slot(bits & kSlotAddressMask, slot_in_userdata(bits));
  if (uint32_t(__ldg(reinterpret_cast<const unsigned long long*>(&context->config.config))) == ~0u)
    never_called(kernel_of(userdata));
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_red(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  count_block(kernel_of(userdata), true, sm_id());
  if (pc == 0) never_called(kernel_of(userdata));
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_count(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  const uint32_t flags = flags_of(userdata);
  count_block(kernel_of(userdata), flags_mode(flags) >= uint32_t(Mode::Counter), sm_id());
  if (flags == ~0u) never_called(kernel_of(userdata));
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_count_inline(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  count_block(kernel_of(userdata), flags_mode(flags_of(userdata)) >= uint32_t(Mode::Counter), sm_id());
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_census(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader() || !is_first_block()) return SANITIZER_PATCH_SUCCESS;
  count_launch(kernel_of(userdata), pack_grid(gridDim.x, gridDim.y, gridDim.z),
               pack_block(blockDim.x, blockDim.y, blockDim.z));
  if (pc == 0) never_called(kernel_of(userdata));
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_tid_inline(void* userdata, uint64_t pc) {
  asm volatile("" ::"r"(threadIdx.x | threadIdx.y | threadIdx.z));  // kept, though nothing uses it
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_red_inline(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  count_block(kernel_of(userdata), true, sm_id());
  return SANITIZER_PATCH_SUCCESS;
}
