// vector_kernels_description (ops/cpu_isa.h): asks the CPU the same question GCC's target_clones
// resolver asks (__builtin_cpu_supports of the ISA levels, in the clones' order), so the answer
// names the clone the marked kernels run.
#include "myriad/ops/cpu_isa.h"

#include "cpu_clones.h"

namespace myriad::cpu {

namespace {

// The widest vector ISA this translation unit was compiled for.
[[maybe_unused]] const char* compiled_isa() {
#if defined(__AVX512F__) && defined(MYRIAD_CPU_PREFER_512_BIT_VECTORS)
  return "AVX-512, 512-bit vectors";
#elif defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__)
  return "AVX2";
#elif defined(__SSE2__)
  return "SSE2";
#else
  return "scalar";
#endif
}

}  // namespace

std::string vector_kernels_description() {
#if MYRIAD_CPU_CLONES_ACTIVE
  __builtin_cpu_init();
#if MYRIAD_CPU_ISA_CLONES >= 4
  if (__builtin_cpu_supports("x86-64-v4"))
    return "run-time dispatch: the x86-64-v4 (AVX-512) clones of v4 / v3 / baseline";
  constexpr const char* kClones = " clones of v4 / v3 / baseline";
#else
  constexpr const char* kClones = " clones of v3 / baseline (MYRIAD_CPU_CLONE_WIDEST=x86-64-v3)";
#endif
  const char* chosen = __builtin_cpu_supports("x86-64-v3") ? "x86-64-v3 (AVX2 + FMA)" : "baseline x86-64 (SSE2)";
  return std::string("run-time dispatch: the ") + chosen + kClones;
#elif defined(MYRIAD_CPU_ISA_CLONES) && MYRIAD_CPU_ISA_CLONES < 3
  return std::string("portable build, the baseline alone (MYRIAD_CPU_CLONE_WIDEST=baseline): ") + compiled_isa();
#elif defined(MYRIAD_CPU_ISA_CLONES)
  return std::string("portable build without run-time dispatch on this compiler: ") + compiled_isa();
#else
  return std::string("compiled for the build machine (-march=native): ") + compiled_isa();
#endif
}

}  // namespace myriad::cpu
