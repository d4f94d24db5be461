// What the benchmarks' injected tools (bench/floor_tool, bench/repatch_tool) share: each finds its
// patch fatbin beside its own library, wherever the wheel installed it, unless told another.
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace gpuobs_bench {

// The folder of the shared library this code is linked into ("." when it cannot be told).
inline std::string library_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&library_directory), &info) == 0 || !info.dli_fname) return ".";
  std::string path(info.dli_fname);
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The patch fatbin a tool loads: the file the environment variable `variable` names, else
// `name` beside the tool's own library.
inline std::string patch_file(const char* variable, const char* name) {
  const char* file = std::getenv(variable);
  return file && *file ? file : library_directory() + "/" + name;
}

}  // namespace gpuobs_bench
