// What the CPU ops' vector kernels run as on this machine: compiled for the build machine
// (-march=native, the default), or — in a portable build — which of their AVX-512 / AVX2 /
// baseline clones the loader picked (src/ops/cpu/cpu_clones.h). For benchmark headers and logs.
#pragma once

#include <string>

namespace myriad::cpu {

// e.g. "run-time dispatch: the x86-64-v4 (AVX-512) clones of v4 / v3 / baseline" or
// "compiled for the build machine (-march=native): AVX-512".
std::string vector_kernels_description();

}  // namespace myriad::cpu
