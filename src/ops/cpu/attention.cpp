// CPU attention: blocked online-softmax forward and flash-style backward on the CPU GEMM
// (ops/cpu_gemm.h).
//
// A query block reads its visible keys as runs of consecutive rows (key_runs: every key up to the
// block's last position when dense and causal; the listed blocks of a block-sparse layout, adjacent
// ones merged), each run in pieces of up to block_k keys; positions are global (q_offset, k_offset).
// Forward, per (b, q head, query block) — one OpenMP task each, heaviest (last) causal blocks
// first: for each piece, S = scale Q_blk K_piece^T (sgemm), the causal mask only truncates rows
// of pieces that cross the diagonal, then the running row max m and sum l are updated, the
// accumulator is rescaled by exp(m_old - m_new) and O += P V_piece (sgemm).
// Backward, per (b, kv head) — the task owns grad_k / grad_v of that head and the grad_q rows of
// every q head that reads it, so there are no races: for each q head, query block and piece, P is
// recomputed from lse, dV += P^T dO, dP = dO V^T, dS = P (dP - delta), dQ += scale dS K,
// dK += scale dS^T Q, with delta = rowsum(dO * O).
//
// Invariants: no T x T buffer (scratch is block_q x block_k per thread plus one delta row per q
// head of a group); each output element is produced by one task in a fixed order, so results do
// not depend on the number of threads; the CPU GEMM (OpenBLAS or oneDNN, both on OpenMP) runs
// single-threaded inside our parallel region; row sums use fixed 16-lane partial sums so they vectorise
// deterministically.
#include "myriad/ops/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu_clones.h"
#include "fast_exp.h"
#include "row_max.h"
#include "myriad/ops/cpu_gemm.h"

namespace myriad::cpu {

namespace {

using std::int64_t;
constexpr int kLanes = 16;

// A (B, H, T, D) tensor seen as B * H row-major (T, D) BLAS matrices.
struct Heads {
  float* base = nullptr;
  int64_t stride_b = 0, stride_h = 0;
  int64_t ld = 1;

  Heads() = default;
  explicit Heads(const Tensor& t)
      : base(t.data<float>()),
        stride_b(t.stride(0)),
        stride_h(t.stride(1)),
        ld(t.size(2) <= 1 ? std::max<int64_t>(t.size(3), 1) : t.stride(2)) {}
  float* head(int64_t b, int64_t h) const { return base + b * stride_b + h * stride_h; }
};

struct Problem {
  int64_t B, Hq, Hkv, Tq, Tk, D, group, block_q, block_k;
  int64_t q_offset, k_offset;
  float scale;
  bool causal;
  const BlockLayout* layout;
};

Problem make_problem(const AttentionArgs& args, const Tensor& q, const Tensor& k) {
  Problem p{};
  p.B = q.size(0);
  p.Hq = q.size(1);
  p.Hkv = k.size(1);
  p.Tq = q.size(2);
  p.Tk = k.size(2);
  p.D = q.size(3);
  p.group = p.Hq / p.Hkv;
  // Automatic blocks: 256 amortises the GEMM's packing better, 128 wastes less of the diagonal on
  // short sequences (bench_attention, 2 threads: the crossover is near T = 2048).
  const int64_t automatic = std::max(p.Tq, p.Tk) >= 2048 ? 256 : 128;
  p.block_q = std::min<int64_t>(args.block_q > 0 ? args.block_q : automatic, std::max<int64_t>(p.Tq, 1));
  p.block_k = std::min<int64_t>(args.block_k > 0 ? args.block_k : automatic, std::max<int64_t>(p.Tk, 1));
  p.layout = args.layout;
  // A layout's query blocks are its blocks; its key blocks are read in pieces of up to block_k.
  if (p.layout != nullptr) p.block_q = p.layout->block_size;
  p.q_offset = args.q_offset;
  p.k_offset = args.k_offset;
  p.scale = attention_scale(args, p.D);
  p.causal = args.causal;
  return p;
}

// The layout row set that (b, h) reads.
int64_t layout_set(const Problem& p, int64_t b, int64_t h) {
  return p.layout != nullptr && p.layout->sets > 1 ? b * p.Hq + h : 0;
}

// A run of consecutive visible key rows [begin, end) of k.
struct KeyRun {
  int64_t begin, end;
};

// The key rows that query rows [i0, i0 + bq) may see, as ascending disjoint runs: every key up to
// the block's last position (causal), restricted to the layout's blocks for this query block.
void key_runs(const Problem& p, int64_t set, int64_t i0, int64_t bq, std::vector<KeyRun>& runs) {
  runs.clear();
  const int64_t limit = p.causal ? std::clamp<int64_t>(p.q_offset + i0 + bq - p.k_offset, 0, p.Tk) : p.Tk;
  if (p.layout == nullptr) {
    if (limit > 0) runs.push_back({0, limit});
    return;
  }
  const int64_t bs = p.layout->block_size;
  for (const std::int32_t kb : p.layout->row(set, (p.q_offset + i0) / bs)) {
    const int64_t begin = std::max<int64_t>(kb * bs - p.k_offset, 0);
    const int64_t end = std::min<int64_t>(kb * bs + bs - p.k_offset, limit);
    if (begin >= end) continue;
    if (!runs.empty() && runs.back().end == begin) {
      runs.back().end = end;
    } else {
      runs.push_back({begin, end});
    }
  }
}

// Keys of a piece [j0, j0 + bk) of a run that query row i may see: a prefix of length in [0, bk].
int64_t visible_keys(const Problem& p, int64_t i, int64_t j0, int64_t bk) {
  if (!p.causal) return bk;
  return std::clamp<int64_t>(p.q_offset + i - (p.k_offset + j0) + 1, 0, bk);
}

// x[c] = exp(x[c] - shift) for c < n; returns their sum (fixed lane order).
MYRIAD_CPU_CLONES float exp_shift_sum(float* x, int64_t n, float shift) {
  float lanes[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float e = fast_exp(x[c + l] - shift);
      x[c + l] = e;
      lanes[l] += e;
    }
  }
  float sum = 0.0f;
  for (; c < n; ++c) {
    x[c] = fast_exp(x[c] - shift);
    sum += x[c];
  }
  for (float lane : lanes) sum += lane;
  return sum;
}

MYRIAD_CPU_CLONES void exp_shift(float* x, int64_t n, float shift) {
  for (int64_t c = 0; c < n; ++c) x[c] = fast_exp(x[c] - shift);
}

MYRIAD_CPU_CLONES float dot(const float* a, const float* b, int64_t n) {
  float lanes[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += a[c + l] * b[c + l];
  }
  float sum = 0.0f;
  for (; c < n; ++c) sum += a[c] * b[c];
  for (float lane : lanes) sum += lane;
  return sum;
}

void zero_rows(float* x, int64_t ld, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) std::fill(x + r * ld, x + r * ld + cols, 0.0f);
}

// --- forward ---------------------------------------------------------------------------------

struct ForwardScratch {
  std::vector<float> scores, acc, row_max, row_sum;
  std::vector<KeyRun> runs;
  explicit ForwardScratch(const Problem& p)
      : scores(p.block_q * p.block_k), acc(p.block_q * p.D), row_max(p.block_q), row_sum(p.block_q) {}
};

// Rows [i0, i0 + bq) of one head against the key runs in s.runs: o and lse for those rows.
MYRIAD_CPU_CLONES void forward_query_block(const Problem& p, const float* q, int64_t ldq, const float* k, int64_t ldk,
                                           const float* v, int64_t ldv, float* o, int64_t ldo, float* lse, int64_t i0,
                                           int64_t bq, ForwardScratch& s) {
  const int64_t D = p.D;
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  float* scores = s.scores.data();
  float* acc = s.acc.data();
  float* m = s.row_max.data();
  float* l = s.row_sum.data();
  std::fill(m, m + bq, kNone);
  std::fill(l, l + bq, 0.0f);
  std::fill(acc, acc + bq * D, 0.0f);
  for (const KeyRun& run : s.runs) {
    for (int64_t j0 = run.begin; j0 < run.end; j0 += p.block_k) {
      const int64_t bk = std::min(p.block_k, run.end - j0);
      sgemm(false, true, bq, bk, D, p.scale, q + i0 * ldq, ldq, k + j0 * ldk, ldk, 0.0f, scores, bk);
      for (int64_t r = 0; r < bq; ++r) {
        float* row = scores + r * bk;
        const int64_t n = visible_keys(p, i0 + r, j0, bk);
        std::fill(row + n, row + bk, 0.0f);
        if (n == 0) continue;  // row entirely masked in this piece: state unchanged
        const float m_new = std::max(m[r], row_max(row, n));
        const float sum = exp_shift_sum(row, n, m_new);
        if (m[r] != kNone && m_new != m[r]) {
          const float alpha = fast_exp(m[r] - m_new);
          l[r] *= alpha;
          float* acc_row = acc + r * D;
          for (int64_t d = 0; d < D; ++d) acc_row[d] *= alpha;
        }
        l[r] += sum;
        m[r] = m_new;
      }
      sgemm(false, false, bq, D, bk, 1.0f, scores, bk, v + j0 * ldv, ldv, 1.0f, acc, D);
    }
  }
  for (int64_t r = 0; r < bq; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;  // a row that saw no key: zeros
    const float* acc_row = acc + r * D;
    float* out_row = o + (i0 + r) * ldo;
    for (int64_t d = 0; d < D; ++d) out_row[d] = acc_row[d] * inv;
    lse[i0 + r] = l[r] > 0.0f ? m[r] + std::log(l[r]) : kNone;
  }
}

// --- backward --------------------------------------------------------------------------------

struct BackwardScratch {
  std::vector<float> probs, dprobs, delta;
  std::vector<KeyRun> runs;
  explicit BackwardScratch(const Problem& p)
      : probs(p.block_q * p.block_k), dprobs(p.block_q * p.block_k), delta(p.group * p.Tq) {}
};

struct BackwardTensors {
  Heads q, k, v, o, grad_out, grad_q, grad_k, grad_v;
  const float* lse;
  bool want_q, want_k, want_v, accumulate;
};

// Everything that kv head g of batch entry b contributes to: grad_k / grad_v of (b, g) and
// grad_q of the q heads g * group + [0, group). Query blocks in order, then their key runs.
MYRIAD_CPU_CLONES void backward_kv_head(const Problem& p, const BackwardTensors& t, int64_t b, int64_t g,
                                        BackwardScratch& s) {
  const int64_t D = p.D;
  const float* k = t.k.head(b, g);
  const float* v = t.v.head(b, g);
  float* gk = t.want_k ? t.grad_k.head(b, g) : nullptr;
  float* gv = t.want_v ? t.grad_v.head(b, g) : nullptr;
  const bool want_ds = t.want_q || t.want_k;
  if (!t.accumulate) {
    if (gk != nullptr) zero_rows(gk, t.grad_k.ld, p.Tk, D);
    if (gv != nullptr) zero_rows(gv, t.grad_v.ld, p.Tk, D);
  }
  for (int64_t hl = 0; hl < p.group; ++hl) {
    const int64_t h = g * p.group + hl;
    if (t.want_q && !t.accumulate) zero_rows(t.grad_q.head(b, h), t.grad_q.ld, p.Tq, D);
    const float* dout = t.grad_out.head(b, h);
    const float* o = t.o.head(b, h);
    float* delta = s.delta.data() + hl * p.Tq;
    for (int64_t i = 0; i < p.Tq; ++i) delta[i] = dot(dout + i * t.grad_out.ld, o + i * t.o.ld, D);
  }
  float* probs = s.probs.data();
  float* dprobs = s.dprobs.data();
  for (int64_t hl = 0; hl < p.group; ++hl) {
    const int64_t h = g * p.group + hl;
    const float* q = t.q.head(b, h);
    const float* dout = t.grad_out.head(b, h);
    const float* lse = t.lse + (b * p.Hq + h) * p.Tq;
    const float* delta = s.delta.data() + hl * p.Tq;
    float* gq = t.want_q ? t.grad_q.head(b, h) : nullptr;
    for (int64_t i0 = 0; i0 < p.Tq; i0 += p.block_q) {
      const int64_t bq = std::min(p.block_q, p.Tq - i0);
      key_runs(p, layout_set(p, b, h), i0, bq, s.runs);
      for (const KeyRun& run : s.runs) {
        for (int64_t j0 = run.begin; j0 < run.end; j0 += p.block_k) {
          const int64_t bk = std::min(p.block_k, run.end - j0);
          const int64_t ldp = static_cast<int64_t>(bk);
          sgemm(false, true, bq, bk, D, p.scale, q + i0 * t.q.ld, t.q.ld, k + j0 * t.k.ld, t.k.ld, 0.0f, probs, ldp);
          for (int64_t r = 0; r < bq; ++r) {
            float* row = probs + r * bk;
            const bool saw_keys = std::isfinite(lse[i0 + r]);  // -inf: the row saw no key at all
            const int64_t n = saw_keys ? visible_keys(p, i0 + r, j0, bk) : 0;
            exp_shift(row, n, lse[i0 + r]);
            std::fill(row + n, row + bk, 0.0f);
          }
          if (gv != nullptr) {
            sgemm(true, false, bk, D, bq, 1.0f, probs, ldp, dout + i0 * t.grad_out.ld, t.grad_out.ld, 1.0f,
                  gv + j0 * t.grad_v.ld, t.grad_v.ld);
          }
          if (!want_ds) continue;
          sgemm(false, true, bq, bk, D, 1.0f, dout + i0 * t.grad_out.ld, t.grad_out.ld, v + j0 * t.v.ld, t.v.ld, 0.0f,
                dprobs, ldp);
          for (int64_t r = 0; r < bq; ++r) {
            const float* prow = probs + r * bk;
            float* drow = dprobs + r * bk;
            const float d_i = delta[i0 + r];
            for (int64_t c = 0; c < bk; ++c) drow[c] = prow[c] * (drow[c] - d_i);
          }
          if (gq != nullptr) {
            sgemm(false, false, bq, D, bk, p.scale, dprobs, ldp, k + j0 * t.k.ld, t.k.ld, 1.0f, gq + i0 * t.grad_q.ld,
                  t.grad_q.ld);
          }
          if (gk != nullptr) {
            sgemm(true, false, bk, D, bq, p.scale, dprobs, ldp, q + i0 * t.q.ld, t.q.ld, 1.0f, gk + j0 * t.grad_k.ld,
                  t.grad_k.ld);
          }
        }
      }
    }
  }
}

}  // namespace

void attention_forward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                       Tensor& lse) {
  const Problem p = make_problem(args, q, k);
  if (p.B == 0 || p.Hq == 0 || p.Tq == 0) return;
  const Heads hq(q), hk(k), hv(v), ho(out);
  float* lse_base = lse.data<float>();
  const int64_t blocks = (p.Tq + p.block_q - 1) / p.block_q;
  const int64_t heads = p.B * p.Hq;
  const int64_t tasks = heads * blocks;
  // Scratch is allocated here, not inside the parallel region, so that a failed allocation throws.
  std::vector<ForwardScratch> scratch(static_cast<std::size_t>(omp_get_max_threads()), ForwardScratch(p));
#pragma omp parallel
  {
    ForwardScratch& mine = scratch[static_cast<std::size_t>(omp_get_thread_num())];
    // Task n: head n % heads, query block counted from the last (the most work when causal).
#pragma omp for schedule(dynamic, 1)
    for (int64_t n = 0; n < tasks; ++n) {
      const int64_t bh = n % heads, b = bh / p.Hq, h = bh % p.Hq, g = h / p.group;
      const int64_t i0 = (blocks - 1 - n / heads) * p.block_q;
      const int64_t bq = std::min(p.block_q, p.Tq - i0);
      key_runs(p, layout_set(p, b, h), i0, bq, mine.runs);
      forward_query_block(p, hq.head(b, h), hq.ld, hk.head(b, g), hk.ld, hv.head(b, g), hv.ld, ho.head(b, h), ho.ld,
                          lse_base + bh * p.Tq, i0, bq, mine);
    }
  }
}

void attention_backward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& grad_out, Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) {
  const Problem p = make_problem(args, q, k);
  BackwardTensors t;
  t.want_q = grad_q.defined();
  t.want_k = grad_k.defined();
  t.want_v = grad_v.defined();
  t.accumulate = args.accumulate;
  if (p.B == 0 || p.Hkv == 0 || p.Tq == 0 || p.Tk == 0 || !(t.want_q || t.want_k || t.want_v)) return;
  t.q = Heads(q);
  t.k = Heads(k);
  t.v = Heads(v);
  t.o = Heads(out);
  t.grad_out = Heads(grad_out);
  if (t.want_q) t.grad_q = Heads(grad_q);
  if (t.want_k) t.grad_k = Heads(grad_k);
  if (t.want_v) t.grad_v = Heads(grad_v);
  t.lse = lse.data<float>();
  const int64_t tasks = p.B * p.Hkv;
  std::vector<BackwardScratch> scratch(static_cast<std::size_t>(omp_get_max_threads()), BackwardScratch(p));
#pragma omp parallel
  {
    BackwardScratch& mine = scratch[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1)
    for (int64_t n = 0; n < tasks; ++n) backward_kv_head(p, t, n / p.Hkv, n % p.Hkv, mine);
  }
}

void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse) {
  const int64_t B = out.size(0), H = out.size(1), T = out.size(2), D = out.size(3);
  const Heads ho(out), hp(part_out);
  float* l = lse.data<float>();
  const float* pl = part_lse.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    float* o = ho.head(bh / H, bh % H);
    const float* po = hp.head(bh / H, bh % H);
    for (int64_t i = 0; i < T; ++i) {
      const float a = l[bh * T + i], c = pl[bh * T + i];
      if (!std::isfinite(c)) continue;  // the part saw no key for this row
      float* row = o + i * ho.ld;
      const float* part_row = po + i * hp.ld;
      if (!std::isfinite(a)) {
        std::copy(part_row, part_row + D, row);
        l[bh * T + i] = c;
        continue;
      }
      const double m = std::max(a, c);
      const double wa = std::exp(a - m), wc = std::exp(c - m), sum = wa + wc;
      const float fa = static_cast<float>(wa / sum), fc = static_cast<float>(wc / sum);
      for (int64_t d = 0; d < D; ++d) row[d] = fa * row[d] + fc * part_row[d];
      l[bh * T + i] = static_cast<float>(m + std::log(sum));
    }
  }
}

}  // namespace myriad::cpu
