// MYRIAD_CPU_CLONES — run-time ISA dispatch for the CPU ops' vector kernels in a portable build.
//
// A build with MYRIAD_NATIVE=ON (the default) compiles everything for the build machine
// (-march=native) and this macro is empty. A portable build (MYRIAD_NATIVE=OFF: one binary for
// many machines, as a package or a container image ships it) would otherwise run these loops on
// x86-64's baseline SSE2. There, each function marked MYRIAD_CPU_CLONES is compiled three times —
// for x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the baseline — and GCC's ifunc resolver
// picks the widest the CPU supports when the library loads (target_clones; the OpenMP bodies
// inside a marked function are cloned with it). The clones compute the same function; their bits
// may differ in the last place where one contracts a multiply-add and another does not, as two
// native builds on two machines may. Only GCC on x86-64 (Clang's target_clones differs); elsewhere
// the macro is empty. MYRIAD_CPU_ISA_CLONES holds the widest clone's x86-64 level (CMake's
// MYRIAD_CPU_CLONE_WIDEST): 4 clones v4 / v3 / baseline, 3 leaves v4 out, 1 compiles the baseline
// alone — so that scripts/check_cpu_clones.sh can run the narrower bodies on an AVX-512 machine.
// Internal to src/ops/cpu.
#pragma once

// MYRIAD_CPU_CLONES_ACTIVE: 1 where the marked functions are cloned (cpu_isa.cpp names the clone).
#if defined(MYRIAD_CPU_ISA_CLONES) && MYRIAD_CPU_ISA_CLONES >= 3 && defined(__x86_64__) && defined(__GNUC__) && \
    !defined(__clang__)
#define MYRIAD_CPU_CLONES_ACTIVE 1
#if MYRIAD_CPU_ISA_CLONES >= 4
#define MYRIAD_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MYRIAD_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
#else
#define MYRIAD_CPU_CLONES_ACTIVE 0
#define MYRIAD_CPU_CLONES
#endif
