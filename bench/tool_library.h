// What the benchmarks' injected tools (bench/floor_tool, bench/repatch_tool) share: each finds its
// patch fatbin beside its own library, wherever the wheel installed it.
#pragma once

#include <dlfcn.h>

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

}  // namespace gpuobs_bench
