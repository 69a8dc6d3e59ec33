// cpu::sgemm and its library (ops/cpu_gemm.h). oneDNN's C API is declared here by its documented
// signatures (dnnl_sgemm: row-major, 'N' / 'T'; dnnl_version) and looked up with dlsym. A
// oneDNN GEMM with a vocabulary-sized output dimension, or with few rows against a large b, is cut
// into one slice per OpenMP thread.
#include "myriad/ops/cpu_gemm.h"

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "myriad/core/error.h"

namespace myriad::cpu {

namespace {

using DnnlSgemm = int (*)(char, char, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t,
                          const float*, std::int64_t, float, float*, std::int64_t);
struct DnnlVersion {  // dnnl_version_t
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};
using DnnlVersionFn = const DnnlVersion* (*)();

struct OneDnn {
  DnnlSgemm sgemm = nullptr;
  std::string soname, version;
};

OneDnn load_onednn() {
  OneDnn lib;
  const char* env = std::getenv("MYRIAD_CPU_GEMM");
  if (env != nullptr && std::strcmp(env, "openblas") == 0) return lib;  // not even loaded
  for (const char* soname : {"libdnnl.so.3", "libdnnl.so.2"}) {
    void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) continue;
    lib.sgemm = reinterpret_cast<DnnlSgemm>(dlsym(handle, "dnnl_sgemm"));
    if (lib.sgemm == nullptr) continue;
    lib.soname = soname;
    if (auto version = reinterpret_cast<DnnlVersionFn>(dlsym(handle, "dnnl_version"))) {
      const DnnlVersion* v = version();
      lib.version = std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
    }
    return lib;  // the handle stays open for the process
  }
  return lib;
}

const OneDnn& onednn() {
  static const OneDnn lib = load_onednn();  // the process's loaded library, loaded once
  return lib;
}

GemmLibrary initial_library() {
  const char* env = std::getenv("MYRIAD_CPU_GEMM");
  return gemm_library_for(env == nullptr ? "" : env);
}

std::atomic<GemmLibrary>& selected() {
  static std::atomic<GemmLibrary> library{initial_library()};  // the process's choice (see the header)
  return library;
}

}  // namespace

bool onednn_available() { return onednn().sgemm != nullptr; }

GemmLibrary gemm_library_for(const std::string& choice) {
  if (choice == "auto" || choice.empty()) return onednn_available() ? GemmLibrary::onednn : GemmLibrary::openblas;
  if (choice == "openblas") return GemmLibrary::openblas;
  MYRIAD_CHECK(choice == "onednn", "MYRIAD_CPU_GEMM is '" << choice << "': use auto (the default), openblas or onednn");
  MYRIAD_CHECK(onednn_available(),
               "MYRIAD_CPU_GEMM=onednn: oneDNN's dnnl_sgemm did not load (libdnnl.so.2 or "
               ".so.3: Debian's libdnnl2, which scripts/setup.sh installs)");
  return GemmLibrary::onednn;
}

GemmLibrary gemm_library() { return selected().load(); }

void set_gemm_library(GemmLibrary library) {
  MYRIAD_CHECK(library == GemmLibrary::openblas || onednn_available(),
               "CPU GEMM: oneDNN was chosen but its dnnl_sgemm did not load on this rank");
  selected().store(library);
}

const char* gemm_library_name(GemmLibrary library) { return library == GemmLibrary::onednn ? "onednn" : "openblas"; }

std::string gemm_library_description(GemmLibrary library) {
  if (library == GemmLibrary::onednn) {
    const OneDnn& lib = onednn();
    return "oneDNN " + (lib.version.empty() ? std::string("(version unknown)") : lib.version) + " (" + lib.soname + ")";
  }
  std::string config = openblas_get_config();
  return "OpenBLAS (" + config + "; " + openblas_get_corename() + " kernel)";
}

namespace {

// A vocabulary-sized output dimension: the LM head's GEMMs.
constexpr std::int64_t kSplitMinExtent = 32768;
// Few rows of a non-transposed a against a large b (at least 2^20 elements, 4 MiB: more than a
// core's L2): a linear layer's forward and input gradient at a short batch (B T <= 512 tokens).
// Cut by columns, each thread reads only its half of b. On the 2-vCPU Xeon VM of 2026-12-07 (best
// of 7 rounds, GFLOP/s, oneDNN's own threading -> the cut): 256 x 768 x 3072 263-275 -> 298-314,
// 256 x 3072 x 768 282-286 -> 302-308, 256 x 2304 x 768 303-309 -> 318-320, 256 x 768 x 3072
// (dy W) 309-312 -> 311-315. Not cut, where the cut lost up to 9 %: a b of 768 x 768 or smaller,
// the weight gradients (a transposed), 1024 or more rows.
constexpr std::int64_t kFewRows = 512, kSplitMinB = std::int64_t{1} << 20;

bool worth_splitting(char ta, std::int64_t m, std::int64_t n, std::int64_t k) {
  if (std::max(m, n) >= kSplitMinExtent) return true;
  return ta == 'N' && m <= kFewRows && n >= m && n * k >= kSplitMinB;
}

// oneDNN's sgemm with its larger output dimension cut into one contiguous slice per OpenMP thread,
// each slice a single-threaded call (oneDNN runs sequentially inside a parallel region). On the
// LM head's shapes (2-vCPU Intel VM, 2026-12-07, 3 rounds alternated): 50304 x 768 x 2048 with A
// transposed 6-8 % faster than oneDNN's own threading, 256 x 50304 x 768 4 %, the others within
// 2 %. Each element of c is still one call's sum over the whole K, in that call's order.
int onednn_sgemm_split(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                       std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  const bool split_rows = m >= n;
  const std::int64_t extent = split_rows ? m : n;
  const int threads = omp_get_max_threads();
  std::vector<int> status(static_cast<std::size_t>(threads), 0);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), count = omp_get_num_threads();
    const std::int64_t per = (extent + count - 1) / count;
    const std::int64_t begin = std::min(extent, per * t), end = std::min(extent, begin + per);
    if (begin < end) {
      int& result = status[static_cast<std::size_t>(t)];
      if (split_rows) {  // rows [begin, end) of c: those of op(a)
        const float* a_part = ta == 'T' ? a + begin : a + begin * lda;
        result = onednn().sgemm(ta, tb, end - begin, n, k, alpha, a_part, lda, b, ldb, beta, c + begin * ldc, ldc);
      } else {  // columns [begin, end) of c: those of op(b)
        const float* b_part = tb == 'T' ? b + begin * ldb : b + begin;
        result = onednn().sgemm(ta, tb, m, end - begin, k, alpha, a, lda, b_part, ldb, beta, c + begin, ldc);
      }
    }
  }
  for (int s : status) {
    if (s != 0) return s;
  }
  return 0;
}

}  // namespace

namespace {

void openblas_sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                    const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                    std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

// The process's plan (the header): the installed one read lock-free by every GEMM; every plan ever
// installed is kept alive, so a GEMM that read the pointer just before a replacement stays valid.
struct PlanSlot {
  std::atomic<const GemmPlan*> current{nullptr};
  std::mutex keep_mutex;
  std::vector<std::shared_ptr<const GemmPlan>> kept;
  std::shared_ptr<const GemmPlan> installed;
};

PlanSlot& plan_slot() {
  static PlanSlot slot;
  return slot;
}

thread_local GemmShapeRecording* active_recording = nullptr;  // the thread's recording, if any

}  // namespace

void sgemm_on_route(GemmRoute route, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                    float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                    float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (route == GemmRoute::openblas || k == 0) {  // K = 0: c = beta c, which OpenBLAS does
    openblas_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  MYRIAD_CHECK(onednn_available(), "CPU GEMM route " << gemm_route_name(route) << ": oneDNN's dnnl_sgemm did not load");
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const bool cut = route == GemmRoute::onednn_cut && omp_get_max_threads() > 1 && !omp_in_parallel();
  const int status = cut ? onednn_sgemm_split(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
                         : onednn().sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  MYRIAD_CHECK(status == 0, "oneDNN dnnl_sgemm(" << m << " x " << n << " x " << k << ") failed: status " << status);
}

void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  const bool in_parallel = omp_in_parallel() != 0;
  // The plan and the recording see only calls outside every parallel construct, active or not:
  // the per-thread calls of the attention's blocks and the MoE experts' data-dependent row counts
  // stay on the rule.
  if (omp_get_level() == 0) {
    const GemmShape shape{trans_a, trans_b, m, n, k};
    if (active_recording != nullptr && k > 0) active_recording->add(shape);
    if (const GemmPlan* plan = plan_slot().current.load(std::memory_order_acquire); plan != nullptr && k > 0) {
      if (const std::optional<GemmRoute> route = plan->route(shape)) {
        sgemm_on_route(*route, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
      }
    }
  }
  // Inside a parallel region each call is one thread's: the library's own, never cut.
  const GemmRoute route = in_parallel
                              ? (gemm_library() == GemmLibrary::onednn ? GemmRoute::onednn : GemmRoute::openblas)
                              : fixed_rule_route({trans_a, trans_b, m, n, k});
  sgemm_on_route(route, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

GemmRoute fixed_rule_route(const GemmShape& shape) {
  if (gemm_library() != GemmLibrary::onednn) return GemmRoute::openblas;
  const bool cut = worth_splitting(shape.trans_a ? 'T' : 'N', shape.m, shape.n, shape.k) && omp_get_max_threads() > 1;
  return cut ? GemmRoute::onednn_cut : GemmRoute::onednn;
}

void set_gemm_plan(std::shared_ptr<const GemmPlan> plan) {
  if (plan != nullptr && !onednn_available()) {
    for (const auto& [shape, route] : plan->routes()) {
      MYRIAD_CHECK(route == GemmRoute::openblas, "CPU GEMM plan: " << describe(shape) << " runs on "
                                                                   << gemm_route_name(route)
                                                                   << ", but oneDNN's dnnl_sgemm did not load here");
    }
  }
  PlanSlot& slot = plan_slot();
  const std::lock_guard<std::mutex> lock(slot.keep_mutex);
  if (plan != nullptr && std::find(slot.kept.begin(), slot.kept.end(), plan) == slot.kept.end()) {
    slot.kept.push_back(plan);  // each plan once: engines that take turns reinstall theirs every step
  }
  slot.installed = plan;
  slot.current.store(plan.get(), std::memory_order_release);
}

std::shared_ptr<const GemmPlan> gemm_plan() {
  PlanSlot& slot = plan_slot();
  const std::lock_guard<std::mutex> lock(slot.keep_mutex);
  return slot.installed;
}

GemmShapeRecording::GemmShapeRecording() : slot_(&active_recording) {
  MYRIAD_CHECK(active_recording == nullptr, "GemmShapeRecording: this thread is already recording GEMM shapes");
  active_recording = this;
}

// The constructing thread's slot, whichever thread destroys the recording.
GemmShapeRecording::~GemmShapeRecording() {
  if (*slot_ == this) *slot_ = nullptr;
}

void GemmShapeRecording::add(const GemmShape& shape) {
  const auto at = std::lower_bound(seen_.begin(), seen_.end(), shape);
  if (at == seen_.end() || *at != shape) seen_.insert(at, shape);
}

std::vector<GemmShape> GemmShapeRecording::shapes() const { return seen_; }

}  // namespace myriad::cpu
