# Settings shared by embed-stack's CMake builds of ggml backend libraries from the
# pinned ollama module's sources: the CPU kernel variants (cmake/cpu, `make
# cpu-variants`) and the CUDA backend (cmake/cuda, `make cuda`). Both write into
# EMBED_STACK_BACKEND_DIR the backends and the libggml-base.so they link against,
# found through an $ORIGIN run path; built with these same settings, either build's
# libggml-base serves the other's backends.
#
# Included by each CMakeLists.txt after its project() call, with
# EMBED_STACK_MAKE_TARGET set to the make target that configures it.

if(NOT OLLAMA_DIR)
    message(FATAL_ERROR "OLLAMA_DIR is not set: run `make ${EMBED_STACK_MAKE_TARGET}`, which passes the ollama module's directory")
endif()
if(NOT EMBED_STACK_BACKEND_DIR)
    set(EMBED_STACK_BACKEND_DIR ${CMAKE_BINARY_DIR}/lib)
endif()
set(GGML_DIR ${OLLAMA_DIR}/ml/backend/ggml/ggml)

find_package(Threads REQUIRED)
# ggml's backend libraries declare install rules under CMAKE_INSTALL_BINDIR.
include(GNUInstallDirs)

# Release (-O3) unless told otherwise: deploy's compile test builds the CPU
# variants at -O0 (CMAKE_BUILD_TYPE=EmbedStackCheck), which proves they compile and
# link on any host in a fraction of the time.
if(NOT CMAKE_BUILD_TYPE)
    set(CMAKE_BUILD_TYPE Release)
endif()
set(CMAKE_C_FLAGS_EMBEDSTACKCHECK "-O0")
set(CMAKE_CXX_FLAGS_EMBEDSTACKCHECK "-O0")
set(BUILD_SHARED_LIBS ON)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS ON)

# As ollama's CMakeLists.txt. The options it leaves unset (GGML_CPU_REPACK,
# GGML_OPENMP, GGML_NATIVE) stay off, as in the binary's cgo build of ggml.
set(GGML_BUILD ON)
set(GGML_SHARED ON)
set(GGML_BACKEND_DL ON)
set(GGML_BACKEND_SHARED ON)
set(GGML_SCHED_MAX_COPIES 4)
set(GGML_LLAMAFILE ON)
set(GGML_VERSION_MAJOR 0)
set(GGML_VERSION_MINOR 0)
set(GGML_VERSION_PATCH 0)
set(GGML_VERSION "${GGML_VERSION_MAJOR}.${GGML_VERSION_MINOR}.${GGML_VERSION_PATCH}")

# The libraries find each other in the folder they are loaded from.
set(CMAKE_BUILD_RPATH "$ORIGIN")
set(CMAKE_INSTALL_RPATH "$ORIGIN")
set(CMAKE_BUILD_WITH_INSTALL_RPATH ON)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${EMBED_STACK_BACKEND_DIR})
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${EMBED_STACK_BACKEND_DIR})

include_directories(${GGML_DIR}/include ${GGML_DIR}/src ${GGML_DIR}/src/ggml-cpu ${GGML_DIR}/src/ggml-cpu/amx)
add_compile_definitions(NDEBUG GGML_VERSION=0x0 GGML_COMMIT=0x0)
# Source paths (ggml's asserts quote __FILE__) relative to the module and the build
# folder, so that a library does not depend on where it was built.
add_compile_options(-ffile-prefix-map=${GGML_DIR}=ggml -ffile-prefix-map=${CMAKE_BINARY_DIR}=build)
