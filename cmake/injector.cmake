# The injector library and its patch fatbin. They need the Compute Sanitizer headers and
# library (CUDA toolkit, or PyPI's nvidia-cuda-sanitizer-api) and nvcc. Without them the
# injector is skipped, unless GPUOBS_REQUIRE_INJECTOR is ON (CI sets it): then it is an error.
option(GPUOBS_REQUIRE_INJECTOR "Fail when the injector cannot be built" OFF)
set(GPUOBS_PATCH_ARCHS "80;86;89;90;100;120" CACHE STRING "SM architectures the patch fatbin is built for")
set(GPUOBS_SANITIZER_ROOT "$ENV{GPUOBS_SANITIZER_ROOT}" CACHE PATH "Directory holding include/sanitizer.h")

# Where pip's nvidia-cuda-sanitizer-api put its files, if it is installed for this Python.
execute_process(
  COMMAND ${Python_EXECUTABLE} -c "import nvidia, os; print(';'.join(os.path.join(p, 'cu13') for p in nvidia.__path__))"
  OUTPUT_VARIABLE _gpuobs_pip_cuda OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)

find_path(GPUOBS_SANITIZER_INCLUDE sanitizer.h
  HINTS ${GPUOBS_SANITIZER_ROOT} /usr/local/cuda/compute-sanitizer ${_gpuobs_pip_cuda}
  PATH_SUFFIXES include)
find_library(GPUOBS_SANITIZER_LIBRARY sanitizer-public
  HINTS ${GPUOBS_SANITIZER_ROOT} /usr/local/cuda/compute-sanitizer ${_gpuobs_pip_cuda}
  PATH_SUFFIXES lib lib64 "")
find_path(GPUOBS_CUDA_INCLUDE cuda.h HINTS $ENV{CUDA_HOME} /usr/local/cuda ${_gpuobs_pip_cuda} PATH_SUFFIXES include)
find_program(GPUOBS_NVCC nvcc HINTS $ENV{CUDA_HOME}/bin /usr/local/cuda/bin)

set(_gpuobs_missing "")
foreach(_var GPUOBS_SANITIZER_INCLUDE GPUOBS_SANITIZER_LIBRARY GPUOBS_CUDA_INCLUDE GPUOBS_NVCC)
  if(NOT ${_var})
    list(APPEND _gpuobs_missing ${_var})
  endif()
endforeach()

if(_gpuobs_missing)
  if(GPUOBS_REQUIRE_INJECTOR)
    message(FATAL_ERROR "gpuobs: cannot build the injector, missing: ${_gpuobs_missing}")
  endif()
  message(WARNING "gpuobs: injector skipped, missing: ${_gpuobs_missing}")
  return()
endif()
message(STATUS "gpuobs: sanitizer ${GPUOBS_SANITIZER_INCLUDE}, nvcc ${GPUOBS_NVCC}")

add_library(gpuobs_injector SHARED
  injector/src/injector.cpp
  injector/src/control_thread.cpp
  injector/src/device_context.cpp
  injector/src/patcher.cpp
  injector/src/driver_api.cpp
  injector/src/injector_config.cpp)
target_include_directories(gpuobs_injector PRIVATE ${GPUOBS_SANITIZER_INCLUDE} ${GPUOBS_CUDA_INCLUDE})
target_link_libraries(gpuobs_injector PRIVATE gpuobs_segment ${GPUOBS_SANITIZER_LIBRARY} ${CMAKE_DL_LIBS})
get_filename_component(_gpuobs_sanitizer_dir ${GPUOBS_SANITIZER_LIBRARY} DIRECTORY)
# Found at run time where it was found at build time, or beside the library.
set_target_properties(gpuobs_injector PROPERTIES
  CXX_VISIBILITY_PRESET hidden
  BUILD_RPATH "${_gpuobs_sanitizer_dir}"
  INSTALL_RPATH "$ORIGIN;${_gpuobs_sanitizer_dir}"
  LINK_FLAGS "-Wl,--no-undefined -Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/injector/exports.map")
set_property(TARGET gpuobs_injector APPEND PROPERTY LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/injector/exports.map)
install(TARGETS gpuobs_injector LIBRARY DESTINATION gpuobs/lib)

set(_gpuobs_gencode "")
foreach(_arch ${GPUOBS_PATCH_ARCHS})
  list(APPEND _gpuobs_gencode "-gencode=arch=compute_${_arch},code=sm_${_arch}")
endforeach()
set(_gpuobs_fatbin ${CMAKE_CURRENT_BINARY_DIR}/gpuobs_patches.fatbin)
# The patches include the segment library's headers only (its layout and device-side code).
# ptxas at -O1: at its default level it hoists loads far enough ahead that the block-entry patch
# needs more registers than a patch may use without saving some, and a save is a stack frame
# for every thread of every block (tests/injector/test_build.py checks that there is none).
set(_gpuobs_segment_include ${CMAKE_CURRENT_SOURCE_DIR}/segment/native/include)
file(GLOB _gpuobs_patch_headers ${_gpuobs_segment_include}/gpuobs/*.h)
add_custom_command(
  OUTPUT ${_gpuobs_fatbin}
  COMMAND ${GPUOBS_NVCC} ${_gpuobs_gencode} --fatbin --compile-as-tools-patch -O3 -Xptxas -O1 -std=c++17
          -I${_gpuobs_segment_include} -I${GPUOBS_SANITIZER_INCLUDE}
          -o ${_gpuobs_fatbin} ${CMAKE_CURRENT_SOURCE_DIR}/injector/patches/gpuobs_patches.cu
  DEPENDS injector/patches/gpuobs_patches.cu ${_gpuobs_patch_headers}
  COMMENT "nvcc --compile-as-tools-patch: gpuobs_patches.fatbin"
  VERBATIM)
add_custom_target(gpuobs_patches ALL DEPENDS ${_gpuobs_fatbin})
install(FILES ${_gpuobs_fatbin} DESTINATION gpuobs/lib)

# The floor tool (benchmarks only, bench/floor_tool): empty callbacks and an empty patch, so a
# benchmark can show what the Sanitizer API itself costs beside what gpuobs adds.
add_library(gpuobs_floor_tool SHARED bench/floor_tool/floor_tool.cpp)
target_include_directories(gpuobs_floor_tool PRIVATE ${GPUOBS_SANITIZER_INCLUDE} ${GPUOBS_CUDA_INCLUDE}
                           ${CMAKE_CURRENT_SOURCE_DIR}/injector/src)
target_link_libraries(gpuobs_floor_tool PRIVATE ${GPUOBS_SANITIZER_LIBRARY} ${CMAKE_DL_LIBS})
set_target_properties(gpuobs_floor_tool PROPERTIES
  CXX_VISIBILITY_PRESET hidden
  BUILD_RPATH "${_gpuobs_sanitizer_dir}"
  INSTALL_RPATH "$ORIGIN;${_gpuobs_sanitizer_dir}")
install(TARGETS gpuobs_floor_tool LIBRARY DESTINATION gpuobs/lib)
