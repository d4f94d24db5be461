// Graph execs across unpatch and re-patch, with bench/repatch_tool injected: what an exec
// instantiated before a change of the patched code runs afterwards. The arguments are steps, run
// in order; each prints one JSON line: the step, CUDA's error (null if none) and whether it was
// fatal, the tool's failed calls (-1: no tool), the exec update's result, whether the launches it
// made gave the right output (null: it launched nothing), and how much each of the tool's three
// counters grew (set a's blocks, set b's blocks, set b's global accesses; null after a fatal
// error). A last line sums up.
//
//   eager          scale_kernel (8 x 128) then offset_kernel (4 x 256) on one stream: 12 blocks
//   instantiate    a new exec of the graph captured from the same two launches (numbered from 0)
//   replay:N       launch exec N
//   update:N       cudaGraphExecUpdate(exec N, the graph), nothing launched
//   unpatch, patch:a, patch:b   the tool's gpuobs_repatch(step)
//
// It stops after the first step CUDA reports an error for (the context may not survive it),
// except a refused exec update, which leaves the context as it was.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "program_support.h"

constexpr int kElements = 1024;
constexpr int kBlocksPerPass = 8 + 4;

// one load and one store per thread
__global__ void scale_kernel(const float* in, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = 2.0f * in[i] + 1.0f;
}

// one load and one store per thread
__global__ void offset_kernel(float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] += 3.0f;
}

using Bind = int (*)(void*);
using Repatch = int (*)(const char*);

void launch(cudaStream_t stream, const float* in, float* out) {
  scale_kernel<<<8, 128, 0, stream>>>(in, out);
  offset_kernel<<<4, 256, 0, stream>>>(out);
}

int main(int argc, char** argv) {
  CHECK(cudaFree(nullptr));  // CUDA initialised: the injected tool is loaded and subscribed
  Bind bind = nullptr;
  Repatch repatch = nullptr;
  const char* injected = std::getenv("CUDA_INJECTION64_PATH");
  if (void* tool = injected ? dlopen(injected, RTLD_NOW | RTLD_NOLOAD) : nullptr) {
    bind = reinterpret_cast<Bind>(dlsym(tool, "gpuobs_repatch_bind"));
    repatch = reinterpret_cast<Repatch>(dlsym(tool, "gpuobs_repatch"));
  }
  std::vector<float> input(kElements), expected(kElements), output(kElements);
  for (int i = 0; i < kElements; ++i) {
    input[i] = 0.5f * float(i);
    expected[i] = 2.0f * input[i] + 1.0f + 3.0f;  // exact in float
  }
  float *in, *out;
  unsigned long long* counters;
  CHECK(cudaMalloc(&in, kElements * sizeof(float)));
  CHECK(cudaMalloc(&out, kElements * sizeof(float)));
  CHECK(cudaMalloc(&counters, 3 * sizeof(unsigned long long)));
  CHECK(cudaMemcpy(in, input.data(), kElements * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(counters, 0, 3 * sizeof(unsigned long long)));
  const int bind_failures = bind ? bind(counters) : -1;
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;  // captured at the first instantiate, after the kernels have loaded
  std::vector<cudaGraphExec_t> execs;
  unsigned long long before[3] = {0, 0, 0};
  int stopped_at = -1;
  for (int index = 1; index < argc && stopped_at < 0; ++index) {
    const std::string step = argv[index];
    cudaError_t status = cudaSuccess;
    int tool_failures = 0;
    int update_result = -1;
    std::string refused;
    bool launched = false;
    const size_t colon = step.find(':');
    const size_t exec = colon == std::string::npos ? 0 : std::strtoul(step.c_str() + colon + 1, nullptr, 10);
    if (step == "eager" || step.rfind("replay:", 0) == 0) {
      if (step != "eager" && exec >= execs.size()) {
        std::fprintf(stderr, "%s: no such exec\n", step.c_str());
        return 2;
      }
      CHECK(cudaMemsetAsync(out, 0, kElements * sizeof(float), stream));
      if (step == "eager") {
        launch(stream, in, out);
        status = cudaGetLastError();
      } else {
        status = cudaGraphLaunch(execs[exec], stream);
      }
      if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
      launched = true;
    } else if (step == "instantiate") {
      if (!graph) {
        CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        launch(stream, in, out);
        CHECK(cudaStreamEndCapture(stream, &graph));
      }
      cudaGraphExec_t made = nullptr;
      status = cudaGraphInstantiate(&made, graph, 0);
      if (status == cudaSuccess) execs.push_back(made);
    } else if (step.rfind("update:", 0) == 0) {
      if (exec >= execs.size()) {
        std::fprintf(stderr, "%s: no such exec\n", step.c_str());
        return 2;
      }
      cudaGraphExecUpdateResultInfo info{};
      status = cudaGraphExecUpdate(execs[exec], graph, &info);
      update_result = int(info.result);
      if (status == cudaErrorGraphExecUpdateFailure) {  // refused: the exec is as it was
        refused = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
        cudaGetLastError();
        status = cudaSuccess;
      }
    } else if (step == "unpatch" || step == "patch:a" || step == "patch:b") {
      tool_failures = repatch ? repatch(step.c_str()) : -1;
    } else {
      std::fprintf(stderr, "%s: not a step\n", step.c_str());
      return 2;
    }
    bool output_ok = false;
    unsigned long long now[3] = {0, 0, 0};
    if (status == cudaSuccess && launched)
      status = cudaMemcpy(output.data(), out, kElements * sizeof(float), cudaMemcpyDeviceToHost);
    if (status == cudaSuccess) status = cudaMemcpy(now, counters, sizeof(now), cudaMemcpyDeviceToHost);
    if (status == cudaSuccess && launched) {
      output_ok = true;
      for (int i = 0; i < kElements; ++i) output_ok = output_ok && output[i] == expected[i];
    }
    std::string error = refused;
    if (status != cudaSuccess) error = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
    std::printf("{\"step\": \"%s\", \"error\": %s%s%s, \"fatal\": %s, \"tool_failures\": %d, \"update_result\": %d, ",
                step.c_str(), error.empty() ? "null" : "\"", error.c_str(), error.empty() ? "" : "\"",
                status == cudaSuccess ? "false" : "true", tool_failures, update_result);
    std::printf("\"output_ok\": %s, \"counts\": ", !launched || status != cudaSuccess ? "null"
                                                   : output_ok                        ? "true"
                                                                                      : "false");
    if (status == cudaSuccess) {
      std::printf("[%llu, %llu, %llu]}\n", now[0] - before[0], now[1] - before[1], now[2] - before[2]);
      for (int i = 0; i < 3; ++i) before[i] = now[i];
    } else {
      std::printf("null}\n");
      stopped_at = index - 1;
    }
    std::fflush(stdout);
  }
  std::printf(
      "{\"summary\": true, \"tool\": %s, \"bind_failures\": %d, \"blocks_per_pass\": %d, \"execs\": %zu, "
      "\"stopped_at\": ",
      repatch ? "true" : "false", bind_failures, kBlocksPerPass, execs.size());
  if (stopped_at < 0) std::printf("null}\n");
  else std::printf("%d}\n", stopped_at);
  return 0;
}
