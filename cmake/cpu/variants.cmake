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

# -mtune: the instruction sets stay each variant's, so a library still runs on every
# CPU its table entry admits, but the compiler schedules the code for one CPU.
# EMBED_STACK_CPU_TUNE (the Makefile's CPU_TUNE) sets it for every variant
# (CPU_TUNE=generic for GCC's default everywhere). Unset, a variant whose CPUs are
# one family is tuned for it: EMBED_STACK_TUNE_<name> lists the -mtune values in
# order of preference, and the first the compiler accepts is used; the others keep
# GCC's `generic`, since their CPUs are several (haswell runs Intel from 2013 on and
# AMD Zen 1 to 3) or no measurement says which tuning pays. Measured
# (docs/performance.md, "Tuning the zen4 variant"): on AMD Zen 5, zen4 tuned for
# znver3 (GCC 12 knows no znver4) ran 1.03 to 1.04 x the same library tuned
# generic, four interleaved rounds on a quiet host, which brought it from 0.92 to
# 1.01 x a -march=native build to 0.96 to 1.04 x.
set(EMBED_STACK_CPU_TUNE "" CACHE STRING "-mtune for every CPU kernel variant (empty: each variant's own, see EMBED_STACK_TUNE_<name>; generic: the compiler's default)")
set(EMBED_STACK_TUNE_zen4 znver4 znver3)

include(CheckCXXCompilerFlag)
add_custom_target(cpu-variants)
function(embed_stack_cpu_variant name)
    ggml_add_cpu_backend_variant(${name} ${ARGN})
    set(tune "${EMBED_STACK_CPU_TUNE}")
    if(NOT tune)
        foreach(t IN LISTS EMBED_STACK_TUNE_${name})
            string(MAKE_C_IDENTIFIER "EMBED_STACK_HAS_MTUNE_${t}" known)
            check_cxx_compiler_flag(-mtune=${t} ${known})
            if(${known})
                set(tune ${t})
                break()
            endif()
        endforeach()
    endif()
    if(tune)
        target_compile_options(ggml-cpu-${name} PRIVATE -mtune=${tune})
        message(STATUS "ggml-cpu-${name}: -mtune=${tune}")
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
