// The CPU ops' single-precision GEMM — row-major c = alpha op(a) op(b) + beta c, cblas's contract
// — and the library it runs on. OpenBLAS is linked; oneDNN's dnnl_sgemm is loaded with dlopen
// (RTLD_LOCAL, from Debian's libdnnl2: the build needs neither its headers nor its library) and is
// the default where it loads: on the model's GEMMs it ran faster than OpenBLAS at most shapes
// measured and on every training step measured (docs/performance.md, "The CPU GEMM"). It was
// opt-in for a day after heap aborts inside its free() in two-rank runs; those followed a SIGTERM
// delivered to a working thread and stopped once the training driver confined its stop signals to
// one sigwait thread (python/myriad/train.py: 11 of 42 runs aborted before, 0 of 42 after).
//
// Which library a process uses: MYRIAD_CPU_GEMM = auto (the default: oneDNN when it loads, else
// OpenBLAS) | openblas (oneDNN is not even loaded) | onednn (an error when it does not load), read
// at first use. The Engine then
// makes every rank use the same one (set_gemm_library) and logs it. The choice belongs to the
// process, like a BLAS library's own thread settings: one per process, not per engine. Results
// differ between the two libraries in the last bits.
//
// A measured plan (ops/cpu_gemm_plan.h, training.cpu_gemm measured) overrides that rule shape by
// shape: a GEMM whose shape the installed plan lists runs on the plan's route. Like the library,
// the plan belongs to the process; calls made inside an OpenMP parallel construct, active or not
// (the attention's per-thread blocks, the MoE experts' grouped GEMMs), never consult it and are
// never recorded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "myriad/ops/cpu_gemm_plan.h"

namespace myriad::cpu {

enum class GemmLibrary { openblas, onednn };

// The library this process's CPU GEMMs run on.
GemmLibrary gemm_library();
// The library MYRIAD_CPU_GEMM's value `choice` names ("" = auto); throws naming the variable for
// another value, or for onednn when oneDNN did not load.
GemmLibrary gemm_library_for(const std::string& choice);
// Makes every later CPU GEMM of the process run on `library` (onednn must be available).
void set_gemm_library(GemmLibrary library);
// Whether oneDNN's sgemm loaded.
bool onednn_available();
// "OpenBLAS 0.3.21 (Cooperlake kernel)", "oneDNN 2.6.3 (libdnnl.so.2)".
std::string gemm_library_description(GemmLibrary library);
const char* gemm_library_name(GemmLibrary library);  // "openblas" | "onednn"

// c (m x n, leading dimension ldc) = alpha op(a) op(b) + beta c, row-major; op(a) is m x k, op(b)
// k x n; lda / ldb the leading dimensions of a and b as stored. On oneDNN, outside a parallel
// region, a GEMM whose m or n is at least 32768 (an LM head's) runs as one single-threaded call
// per OpenMP thread on a slice of that dimension, faster than oneDNN's own threading there.
void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

// The route the fixed rule gives `shape` outside a parallel region: the process's library, and on
// oneDNN the cut where myriad measured it faster (worth_splitting in cpu_gemm.cpp).
GemmRoute fixed_rule_route(const GemmShape& shape);

// The same product on one given route, whatever the plan or the rule would pick (what the plan's
// timing runs); throws for a oneDNN route when oneDNN did not load.
void sgemm_on_route(GemmRoute route, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                    float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                    float* c, std::int64_t ldc);

// Installs `plan` for every later CPU GEMM of the process (nullptr: none, the rule alone); throws,
// installing nothing, when a route it names cannot run here (oneDNN not loaded).
void set_gemm_plan(std::shared_ptr<const GemmPlan> plan);
std::shared_ptr<const GemmPlan> gemm_plan();  // the installed plan, or nullptr

// While alive, records the distinct shapes of the GEMMs that cpu::sgemm runs on the constructing
// thread outside parallel constructs (one recording per thread at a time: nesting throws). It may
// be destroyed on another thread: it clears the constructing thread's slot.
class GemmShapeRecording {
 public:
  GemmShapeRecording();
  ~GemmShapeRecording();
  GemmShapeRecording(const GemmShapeRecording&) = delete;
  GemmShapeRecording& operator=(const GemmShapeRecording&) = delete;
  // The shapes seen so far, sorted; K = 0 products (no GEMM runs) are left out.
  std::vector<GemmShape> shapes() const;
  void add(const GemmShape& shape);

 private:
  GemmShapeRecording** slot_;  // the constructing thread's active recording
  std::vector<GemmShape> seen_;
};

}  // namespace myriad::cpu
