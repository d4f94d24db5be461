# The injector library and its patch fatbin. They need the Compute Sanitizer headers and
# library (CUDA toolkit, or PyPI's nvidia-cuda-sanitizer-api, which pyproject.toml's build
# requirements bring) and nvcc. Without them the build fails and says what to install: a package
# without its injector must be asked for (GPUOBS_DAEMON_ONLY), never the silent result of a
# machine that lacks nvcc.
option(GPUOBS_DAEMON_ONLY "Leave the injector out: daemon, CLI and gpuobs-synth only" OFF)
option(GPUOBS_BENCH_TOOLS "Also build the benchmarks' floor tool and diagnostic patches (never for a service)" OFF)
# Kept so that older scripts that pass it still work: failing is now what every build does.
option(GPUOBS_REQUIRE_INJECTOR "No effect: a build without the injector must ask for GPUOBS_DAEMON_ONLY" ON)
set(GPUOBS_PATCH_ARCHS "80;86;89;90;100;120" CACHE STRING "SM architectures the patch fatbin is built for")
set(GPUOBS_SANITIZER_ROOT "$ENV{GPUOBS_SANITIZER_ROOT}" CACHE PATH "Directory holding include/sanitizer.h")

# The environment variable too, so that `GPUOBS_DAEMON_ONLY=1 pip install .` works where pip's
# arguments are out of reach (a requirements file); read on every configure, not cached.
if(GPUOBS_DAEMON_ONLY OR "$ENV{GPUOBS_DAEMON_ONLY}")
  message(WARNING "gpuobs: daemon-only build: the injector (gpuobs/lib/libgpuobs_injector.so) is left out "
                  "on purpose (GPUOBS_DAEMON_ONLY). gpuobsd, gpuobsctl and gpuobs-synth work; CUDA programs "
                  "cannot be observed with this install.")
  return()
endif()

# Where pip's nvidia-cuda-sanitizer-api put its files, if it is installed for this Python (in
# pip's isolated build environment too: the build backend's Python sees the build requirements).
execute_process(
  COMMAND ${Python_EXECUTABLE} -c "import nvidia, os; print(';'.join(os.path.join(p, 'cu13') for p in nvidia.__path__))"
  OUTPUT_VARIABLE _gpuobs_pip_cuda OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)

# CUDA_HOME, when set, names the toolkit to use (a pip-installed nvcc's nvidia/cu13 folder, say),
# so /usr/local/cuda is searched only without it, and nvcc only there and on PATH: a CUDA_HOME
# and PATH without nvcc mean no nvcc, whatever else the machine holds.
if(NOT "$ENV{CUDA_HOME}" STREQUAL "")
  set(_gpuobs_cuda_home "$ENV{CUDA_HOME}")
else()
  set(_gpuobs_cuda_home /usr/local/cuda)
endif()

find_path(GPUOBS_SANITIZER_INCLUDE sanitizer.h
  HINTS ${GPUOBS_SANITIZER_ROOT} ${_gpuobs_cuda_home}/compute-sanitizer ${_gpuobs_pip_cuda}
  PATH_SUFFIXES include)
find_library(GPUOBS_SANITIZER_LIBRARY sanitizer-public
  HINTS ${GPUOBS_SANITIZER_ROOT} ${_gpuobs_cuda_home}/compute-sanitizer ${_gpuobs_pip_cuda}
  PATH_SUFFIXES lib lib64 "")
find_path(GPUOBS_CUDA_INCLUDE cuda.h HINTS ${_gpuobs_cuda_home} ${_gpuobs_pip_cuda} PATH_SUFFIXES include)
find_program(GPUOBS_NVCC nvcc HINTS ${_gpuobs_cuda_home}/bin ENV PATH NO_DEFAULT_PATH)

# What is missing and how to get it, in words; indented lines are printed as they are (CMake
# wraps the others), so that the commands stay whole.
set(_gpuobs_missing "")
set(_gpuobs_remedy "")
if(NOT GPUOBS_NVCC)
  string(APPEND _gpuobs_missing "\n    nvcc, the CUDA compiler (looked for in ${_gpuobs_cuda_home}/bin and on PATH)")
endif()
if(NOT GPUOBS_CUDA_INCLUDE)
  string(APPEND _gpuobs_missing "\n    cuda.h, the CUDA driver API header (looked for in ${_gpuobs_cuda_home}/include)")
endif()
if(NOT GPUOBS_NVCC OR NOT GPUOBS_CUDA_INCLUDE)
  string(APPEND _gpuobs_remedy
    "To build it, install the CUDA toolkit (13.0) and put its bin folder on PATH or set CUDA_HOME "
    "to it, or take nvcc and cuda.h from pip and set CUDA_HOME to the nvidia/cu13 folder they "
    "make:\n"
    "    pip install --target DIR \"nvidia-cuda-nvcc==13.0.*\" \"nvidia-cuda-crt==13.0.*\" \"nvidia-cuda-runtime==13.0.*\" \"nvidia-cuda-cccl==13.0.*\" \"nvidia-nvvm==13.0.*\"\n"
    "    export CUDA_HOME=DIR/nvidia/cu13\n")
endif()
if(NOT GPUOBS_SANITIZER_INCLUDE OR NOT GPUOBS_SANITIZER_LIBRARY)
  string(APPEND _gpuobs_missing "\n    the Compute Sanitizer headers and library (sanitizer.h, libsanitizer-public.so)")
  string(APPEND _gpuobs_remedy
    "The Compute Sanitizer comes with `pip install .` (a build requirement); a build with "
    "--no-build-isolation needs it installed in its Python first (or GPUOBS_SANITIZER_ROOT set "
    "to a folder holding include/sanitizer.h):\n"
    "    pip install \"nvidia-cuda-sanitizer-api==13.0.*\"\n")
endif()
if(_gpuobs_missing)
  message(FATAL_ERROR
    "gpuobs: cannot build the injector (gpuobs/lib/libgpuobs_injector.so). Missing:${_gpuobs_missing}\n"
    "${_gpuobs_remedy}"
    "To build without the injector (gpuobsd, gpuobsctl and gpuobs-synth only), ask for it:\n"
    "    pip install -C cmake.define.GPUOBS_DAEMON_ONLY=ON .\n"
    "    GPUOBS_DAEMON_ONLY=1 pip install .")
endif()
message(STATUS "gpuobs: sanitizer ${GPUOBS_SANITIZER_INCLUDE}, nvcc ${GPUOBS_NVCC}")

add_library(gpuobs_injector SHARED
  injector/src/injector.cpp
  injector/src/control_thread.cpp
  injector/src/device_context.cpp
  injector/src/patcher.cpp
  injector/src/driver_api.cpp
  injector/src/injector_config.cpp
  injector/src/diagnostics.cpp
  injector/src/plugin_api.cpp
  injector/src/host_annotations.cpp
  injector/src/graph_execs.cpp)
target_include_directories(gpuobs_injector PRIVATE ${GPUOBS_SANITIZER_INCLUDE} ${GPUOBS_CUDA_INCLUDE}
                           ${CMAKE_CURRENT_SOURCE_DIR}/injector/include)
target_link_libraries(gpuobs_injector PRIVATE gpuobs_segment ${GPUOBS_SANITIZER_LIBRARY} ${CMAKE_DL_LIBS})
get_filename_component(_gpuobs_sanitizer_dir ${GPUOBS_SANITIZER_LIBRARY} DIRECTORY)
# Installed, the sanitizer library is found beside the injector: where it was found at build
# time may be gone by then (pip's isolated build environment is deleted after the build).
get_filename_component(_gpuobs_sanitizer_file ${GPUOBS_SANITIZER_LIBRARY} REALPATH)
install(FILES ${_gpuobs_sanitizer_file} DESTINATION gpuobs/lib RENAME libsanitizer-public.so)
set_target_properties(gpuobs_injector PROPERTIES
  CXX_VISIBILITY_PRESET hidden
  BUILD_RPATH "${_gpuobs_sanitizer_dir}"
  INSTALL_RPATH "$ORIGIN"
  LINK_FLAGS "-Wl,--no-undefined -Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/injector/exports.map")
set_property(TARGET gpuobs_injector APPEND PROPERTY LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/injector/exports.map)
install(TARGETS gpuobs_injector LIBRARY DESTINATION gpuobs/lib)

set(_gpuobs_gencode "")
foreach(_arch ${GPUOBS_PATCH_ARCHS})
  list(APPEND _gpuobs_gencode "-gencode=arch=compute_${_arch},code=sm_${_arch}")
endforeach()
set(_gpuobs_fatbin ${CMAKE_CURRENT_BINARY_DIR}/gpuobs_patches.fatbin)
set(_gpuobs_diagnostics "")
if(GPUOBS_BENCH_TOOLS)
  set(_gpuobs_diagnostics -DGPUOBS_DIAGNOSTICS=1)
  target_compile_definitions(gpuobs_injector PRIVATE GPUOBS_DIAGNOSTICS=1)
endif()
# The patches include the segment library's headers only (its layout and device-side code).
# ptxas at -O1: at its default level it hoists loads far enough ahead that the block-entry patch
# needs more registers than a patch may use without saving some, and a save is a stack frame
# for every thread of every block (tests/injector/test_build.py checks that there is none).
set(_gpuobs_segment_include ${CMAKE_CURRENT_SOURCE_DIR}/segment/native/include)
file(GLOB _gpuobs_patch_headers ${_gpuobs_segment_include}/gpuobs/*.h)
add_custom_command(
  OUTPUT ${_gpuobs_fatbin}
  COMMAND ${GPUOBS_NVCC} ${_gpuobs_gencode} --fatbin --compile-as-tools-patch -O3 -Xptxas -O1 -std=c++17
          ${_gpuobs_diagnostics} -I${_gpuobs_segment_include} -I${GPUOBS_SANITIZER_INCLUDE}
          -o ${_gpuobs_fatbin} ${CMAKE_CURRENT_SOURCE_DIR}/injector/patches/gpuobs_patches.cu
  DEPENDS injector/patches/gpuobs_patches.cu injector/patches/diagnostic_patches.cuh ${_gpuobs_patch_headers}
  COMMENT "nvcc --compile-as-tools-patch: gpuobs_patches.fatbin"
  VERBATIM)
add_custom_target(gpuobs_patches ALL DEPENDS ${_gpuobs_fatbin})
install(FILES ${_gpuobs_fatbin} DESTINATION gpuobs/lib)

# The benchmarks' tools, never in a default build: the floor tool (bench/floor_tool: empty
# callbacks and an empty patch, so a benchmark can show what the Sanitizer API itself costs beside
# what gpuobs adds), the repatch tool (below) and the diagnostic patches
# (injector/src/diagnostics.h), whose counts are wrong by design. tests/gpu/install_on_device.sh
# builds with them.
if(GPUOBS_BENCH_TOOLS)
  add_library(gpuobs_floor_tool SHARED bench/floor_tool/floor_tool.cpp)
  target_include_directories(gpuobs_floor_tool PRIVATE ${GPUOBS_SANITIZER_INCLUDE} ${GPUOBS_CUDA_INCLUDE}
                             ${CMAKE_CURRENT_SOURCE_DIR}/injector/src)
  target_link_libraries(gpuobs_floor_tool PRIVATE ${GPUOBS_SANITIZER_LIBRARY} ${CMAKE_DL_LIBS})
  set_target_properties(gpuobs_floor_tool PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    BUILD_RPATH "${_gpuobs_sanitizer_dir}"
    INSTALL_RPATH "$ORIGIN")
  install(TARGETS gpuobs_floor_tool LIBRARY DESTINATION gpuobs/lib)
  # The repatch tool (bench/repatch_tool): unpatches and re-patches every module when the program
  # asks, graph execs alive or not (gpuobs refuses to), so tests/gpu/test_graph_repatch.py can
  # record what an exec runs afterwards; its counting patches are a fatbin of their own.
  add_library(gpuobs_repatch_tool SHARED bench/repatch_tool/repatch_tool.cpp)
  target_include_directories(gpuobs_repatch_tool PRIVATE ${GPUOBS_SANITIZER_INCLUDE} ${GPUOBS_CUDA_INCLUDE})
  target_link_libraries(gpuobs_repatch_tool PRIVATE ${GPUOBS_SANITIZER_LIBRARY} ${CMAKE_DL_LIBS} Threads::Threads)
  set_target_properties(gpuobs_repatch_tool PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    BUILD_RPATH "${_gpuobs_sanitizer_dir}"
    INSTALL_RPATH "$ORIGIN")
  install(TARGETS gpuobs_repatch_tool LIBRARY DESTINATION gpuobs/lib)
  set(_gpuobs_repatch_fatbin ${CMAKE_CURRENT_BINARY_DIR}/gpuobs_repatch_patches.fatbin)
  add_custom_command(
    OUTPUT ${_gpuobs_repatch_fatbin}
    COMMAND ${GPUOBS_NVCC} ${_gpuobs_gencode} --fatbin --compile-as-tools-patch -O3 -std=c++17
            -I${GPUOBS_SANITIZER_INCLUDE} -o ${_gpuobs_repatch_fatbin}
            ${CMAKE_CURRENT_SOURCE_DIR}/bench/repatch_tool/repatch_patches.cu
    DEPENDS bench/repatch_tool/repatch_patches.cu
    COMMENT "nvcc --compile-as-tools-patch: gpuobs_repatch_patches.fatbin"
    VERBATIM)
  add_custom_target(gpuobs_repatch_patches ALL DEPENDS ${_gpuobs_repatch_fatbin})
  install(FILES ${_gpuobs_repatch_fatbin} DESTINATION gpuobs/lib)
endif()
