# The CPU kernel variants embed-stack builds, in ascending order of preference: the
# list of backends/cpuvariant (Go) mirrors this one, name for name and feature for
# feature, and its tests fail when the two differ. ggml_add_cpu_backend_variant
# (ggml's src/CMakeLists.txt) turns each feature on (GGML_<FEATURE>: the compiler's
# -m flags and the macros ggml's kernels test) and builds libggml-cpu-NAME.so; the
# target cpu-variants builds them all.
#
# This file is copied into the build tree as the CMakeLists.txt of a folder that
# shows ggml's CPU sources where ggml's function expects them (see CMakeLists.txt).

# What ggml's src/CMakeLists.txt sets for the folder its own variants are declared in.
if(CMAKE_SYSTEM_NAME MATCHES "Linux")
    add_compile_definitions(_XOPEN_SOURCE=600 _GNU_SOURCE)
endif()
set(CMAKE_GENERATOR_PLATFORM_LWR "")
ggml_get_system_arch()
# On arm64 the variant's features choose its -march (ggml's CPU CMakeLists.txt).
set(GGML_CPU_ALL_VARIANTS ON)

# EMBED_STACK_CPU_TUNE (the Makefile's CPU_TUNE) sets -mtune for every variant: the
# instruction sets stay the variant's, so the library still runs on every CPU its
# table entry admits, but the compiler schedules for that CPU. Unset, GCC tunes
# for `generic`, which release archives and the image need; on the AMD Zen 3
# development host the haswell variant so built reaches 0.9 to 0.98x the compiled-in
# -march=native kernels, whose code -mtune=native (znver3 there) reproduces
# instruction for instruction (docs/performance.md).
set(EMBED_STACK_CPU_TUNE "" CACHE STRING "-mtune for the CPU kernel variants (empty: the compiler's default, generic)")

add_custom_target(cpu-variants)
function(embed_stack_cpu_variant name)
    ggml_add_cpu_backend_variant(${name} ${ARGN})
    if(EMBED_STACK_CPU_TUNE)
        target_compile_options(ggml-cpu-${name} PRIVATE -mtune=${EMBED_STACK_CPU_TUNE})
    endif()
    add_dependencies(cpu-variants ggml-cpu-${name})
endfunction()

if(GGML_SYSTEM_ARCH STREQUAL "x86")
    # An AVX-only CPU (Sandy Bridge, Ivy Bridge): above an x86-64-v2 baseline.
    embed_stack_cpu_variant(sandybridge SSE42 AVX)
    # AVX2 with FMA and F16C: x86-64-v3, every x86 server since about 2015.
    embed_stack_cpu_variant(haswell SSE42 AVX F16C AVX2 BMI2 FMA)
    # AVX-VNNI without AVX-512: Intel client CPUs since Alder Lake.
    embed_stack_cpu_variant(alderlake SSE42 AVX F16C AVX2 BMI2 FMA AVX_VNNI)
    # AVX-512 (F, CD, VL, DQ, BW): Skylake-SP.
    embed_stack_cpu_variant(skylakex SSE42 AVX F16C AVX2 BMI2 FMA AVX512)
    # and VNNI: Cascade Lake.
    embed_stack_cpu_variant(cascadelake SSE42 AVX F16C AVX2 BMI2 FMA AVX512 AVX512_VNNI)
    # and VBMI: Ice Lake-SP.
    embed_stack_cpu_variant(icelake SSE42 AVX F16C AVX2 BMI2 FMA AVX512 AVX512_VBMI AVX512_VNNI)
    # and BF16: AMD Zen 4 and Zen 5.
    embed_stack_cpu_variant(zen4 SSE42 AVX F16C AVX2 BMI2 FMA AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16)
    # and AMX (tile, INT8, BF16): Intel Sapphire Rapids and later. This one compiles
    # ggml-cpu/amx/*.cpp, the AMX buffer type for Q4_0/Q4_1/Q8_0/K-quant weights.
    embed_stack_cpu_variant(sapphirerapids SSE42 AVX F16C AVX2 BMI2 FMA AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16 AMX_TILE AMX_INT8 AMX_BF16)
elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")
    # dotprod (SDOT/UDOT): Cortex-A55/A75 and later.
    embed_stack_cpu_variant(armv8.2_1 DOTPROD)
    # and FP16 vector arithmetic: Neoverse N1 (Graviton2, Ampere Altra).
    embed_stack_cpu_variant(armv8.2_2 DOTPROD FP16_VECTOR_ARITHMETIC)
    # and SVE and i8mm (SMMLA): Neoverse V1 and later (Graviton3, Graviton4).
    embed_stack_cpu_variant(armv8.6_1 DOTPROD FP16_VECTOR_ARITHMETIC SVE MATMUL_INT8)
else()
    message(FATAL_ERROR "embed-stack has no CPU kernel variants for ${GGML_SYSTEM_ARCH} (${CMAKE_SYSTEM_PROCESSOR}): the compiled-in kernels are all there is")
endif()
