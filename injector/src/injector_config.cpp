#include "injector_config.h"

#include <dlfcn.h>
#include <grp.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "gpuobs/cubin_store.h"
#include "gpuobs/producer.h"
#include "injector_log.h"

namespace gpuobs {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return (value && *value) ? value : nullptr;
}

bool parse_uint(const char* text, uint64_t max_value, uint64_t* out) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || value > max_value || text[0] == '-') return false;
  *out = value;
  return true;
}

// The directory this library was loaded from: the patch fatbin ships beside it.
std::string library_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&load_injector_config), &info) == 0 || !info.dli_fname) return ".";
  std::string path(info.dli_fname);
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

InjectorConfig load_injector_config() {
  InjectorConfig config;
  if (const char* dir = env("GPUOBS_SEGMENT_DIR")) config.segment_dir = dir;
  if (const char* set = env("GPUOBS_PATCH_SET")) {
    if (!parse_name(kPatchSetNames, set, &config.patch_set))
      log_line("GPUOBS_PATCH_SET=%s is not block or memory; using block", set);
  }
  if (const char* mode = env("GPUOBS_MODE")) {
    if (!parse_mode(mode, &config.mode)) log_line("GPUOBS_MODE=%s is not a mode; using counter", mode);
  }
  uint64_t number = 0;
  if (const char* shift = env("GPUOBS_SHIFT")) {
    if (parse_uint(shift, kMaxShift, &number)) config.shift = uint32_t(number);
    else log_line("GPUOBS_SHIFT=%s is not 0..31; using %u", shift, config.shift);
  }
  if (const char* records = env("GPUOBS_RING_RECORDS")) {
    if (parse_uint(records, kMaxRingRecords, &number) && is_power_of_two(number))
      config.ring_records = uint32_t(number);
    else log_line("GPUOBS_RING_RECORDS=%s is not a power of two; using %u", records, config.ring_records);
  }
  struct Bounded {
    const char* name;
    uint32_t* value;
    uint64_t low, high;
  };
  for (const Bounded& setting : {Bounded{"GPUOBS_CONTEXTS", &config.contexts, 1, kMaxEventRings},
                                 Bounded{"GPUOBS_PUBLISH_MS", &config.publish_ms, 1, 60000},
                                 Bounded{"GPUOBS_CONTROL_POLL_US", &config.control_poll_us, 50, 1000000},
                                 Bounded{"GPUOBS_CUBIN_MB", &config.cubin_mb, 0, 1u << 20}}) {
    if (const char* text = env(setting.name)) {
      if (parse_uint(text, setting.high, &number) && number >= setting.low) *setting.value = uint32_t(number);
      else log_line("%s=%s is out of range; using %u", setting.name, text, *setting.value);
    }
  }
  if (const char* text = env("GPUOBS_BLOCK_EXIT")) config.block_exit = std::strcmp(text, "1") == 0;
  if (const char* text = env("GPUOBS_EXIT_PUBLISH")) config.exit_publish = std::strcmp(text, "0") != 0;
  if (const char* text = env("GPUOBS_LAUNCH_TRACE")) config.launch_trace = std::strcmp(text, "1") == 0;
  if (const char* text = env("GPUOBS_REPLAY_SPANS")) config.replay_spans = std::strcmp(text, "0") != 0;
  if (const char* text = env("GPUOBS_LAUNCH_TIMES")) config.launch_times = std::strcmp(text, "1") == 0;
  if (const char* text = env("GPUOBS_STEP_ASIDE")) config.step_aside_allowed = std::strcmp(text, "1") == 0;
  if (const char* text = env("GPUOBS_CONFIG_WORD")) {
    if (std::strcmp(text, "bound") == 0) config.bound_config = true;
    else if (std::strcmp(text, "slot") != 0) log_line("GPUOBS_CONFIG_WORD=%s is not slot or bound; using slot", text);
  }
  config.diagnostics = load_diagnostic_patches();
  if (const char* group = env("GPUOBS_GROUP")) {
    if (const struct group* entry = getgrnam(group)) config.group = entry->gr_gid;
    else log_line("GPUOBS_GROUP=%s: no such group; segments stay 0600", group);
  }
  if (const char* chosen = env("GPUOBS_MEMORY_KERNELS")) {
    const std::string problem = memory_kernels_problem(chosen);
    if (problem.empty()) config.memory_kernels = chosen;
    else log_line("GPUOBS_MEMORY_KERNELS is %s; no kernel gets the access hooks", problem.c_str());
  }
  if (config.patch_set == PatchSet::Memory && !config.memory_kernels.empty()) {
    log_line("GPUOBS_MEMORY_KERNELS has no effect with GPUOBS_PATCH_SET=memory (every kernel gets the access hooks)");
  }
  ControlRequest start;
  start.mode = config.mode;
  start.patch_set = config.patch_set;
  if (patch_set_needed(start, !config.memory_kernels.empty()) != config.patch_set) {
    log_line(
        "GPUOBS_MODE=%s records accesses: it needs GPUOBS_MEMORY_KERNELS or GPUOBS_PATCH_SET=memory; "
        "starting in counter",
        mode_name(config.mode));
    config.mode = Mode::Counter;
  }
  if (const char* label = env("GPUOBS_LABEL")) config.label = label;
  config.cubin_dir_default = env("GPUOBS_CUBIN_DIR") == nullptr;
  config.cubin_dir = config.cubin_dir_default ? default_cubin_directory() : env("GPUOBS_CUBIN_DIR");
  config.patch_file =
      env("GPUOBS_PATCH_FILE") ? env("GPUOBS_PATCH_FILE") : library_directory() + "/gpuobs_patches.fatbin";
  return config;
}

}  // namespace gpuobs
