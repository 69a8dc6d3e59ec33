// Ring attention over the context-parallel group (nn/ring_attention.h).
#include "myriad/nn/ring_attention.h"

#include <utility>

#include "myriad/nn/linear.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

namespace {

using std::int64_t;

constexpr int kKvTag = 0, kGradTag = 1;

Tensor half_rows(const Tensor& x, int half, int64_t c) { return x.slice(2, half * c, (half + 1) * c); }

// Chunk `half` of rank `owner`'s two.
int64_t chunk_of(int owner, int half, int size) { return half == 0 ? owner : 2 * size - 1 - owner; }

// Whether any query of chunk qi may see a key of chunk ki (causal mask, layout rows). A selected
// layout stays on its device (no host read inside a step): its pairs run, and the kernels skip
// the key blocks it does not list (a row that sees none merges as lse = -inf).
bool pair_visible(const AttentionArgs& args, int64_t qi, int64_t ki, int64_t c) {
  if (args.causal && ki > qi) return false;
  if (args.selected != nullptr) return true;
  const BlockLayout* layout = args.layout;
  if (layout == nullptr) return true;
  const int64_t bs = layout->block_size;
  const int64_t k_first = ki * c / bs, k_end = (ki * c + c + bs - 1) / bs;
  for (int64_t set = 0; set < layout->sets; ++set) {
    for (int64_t qb = qi * c / bs; qb < (qi * c + c + bs - 1) / bs; ++qb) {
      for (const std::int32_t kb : layout->row(set, qb)) {
        if (kb >= k_first && kb < k_end) return true;
      }
    }
  }
  return false;
}

// K and V packed (2, B, Hkv, 2c, D) for the ring.
struct PackedKv {
  Tensor data;
  Tensor k(int half, int64_t c) const { return half_rows(data.select(0, 0), half, c); }
  Tensor v(int half, int64_t c) const { return half_rows(data.select(0, 1), half, c); }
};

PackedKv pack(const ops::Placement& p, const Tensor& k, const Tensor& v) {
  PackedKv kv{p.empty({2, k.size(0), k.size(1), k.size(2), k.size(3)})};
  Tensor k_dst = kv.data.select(0, 0), v_dst = kv.data.select(0, 1);
  copy(k, k_dst);
  copy(v, v_dst);
  return kv;
}

// The chunk pairs of one step in the order they run: at step 0 the diagonal pairs first (they
// write), then the rest (they merge / accumulate).
struct Pair {
  int q_half, k_half;
};
constexpr Pair kPairs[4] = {{0, 0}, {1, 1}, {0, 1}, {1, 0}};

AttentionArgs pair_args(const AttentionArgs& base, int64_t qi, int64_t ki, int64_t c) {
  AttentionArgs a = base;
  a.q_offset = qi * c;
  a.k_offset = ki * c;
  return a;
}

}  // namespace

void ring_attention_forward(const ContextParallel& cp, const AttentionArgs& args, const Tensor& q, const Tensor& k,
                            const Tensor& v, Tensor& out, Tensor& lse) {
  if (cp.size() == 1) return attention_forward(args, q, k, v, out, lse);
  const int n = cp.size(), r = cp.rank();
  const int64_t B = q.size(0), Hq = q.size(1), c = q.size(2) / 2, D = q.size(3);
  MYRIAD_CHECK(q.size(2) % 2 == 0, "ring attention: the local sequence of " << q.size(2) << " rows is not two chunks");
  const ops::Placement p = ops::placement_of(q, "q");
  PackedKv kv = pack(p, k, v), next{p.empty(kv.data.shape())};
  Tensor lse_halves = lse.view({2, B, Hq, c});
  Tensor part_out = p.empty({B, Hq, c, D}), part_lse = p.empty({B, Hq, c});
  for (int s = 0; s < n; ++s) {
    const int src = (r - s + n) % n;
    std::unique_ptr<RingTransfer> transfer = s + 1 < n ? cp.ring_shift(kv.data, next.data, kKvTag) : nullptr;
    for (const Pair& pair : kPairs) {
      const int64_t qi = cp.chunk_index(pair.q_half), ki = chunk_of(src, pair.k_half, n);
      const bool writes = s == 0 && pair.q_half == pair.k_half;
      if (!writes && !pair_visible(args, qi, ki, c)) continue;
      const AttentionArgs a = pair_args(args, qi, ki, c);
      Tensor out_half = half_rows(out, pair.q_half, c), lse_half = lse_halves.select(0, pair.q_half);
      if (writes) {
        attention_forward(a, half_rows(q, pair.q_half, c), kv.k(pair.k_half, c), kv.v(pair.k_half, c), out_half,
                          lse_half);
      } else {
        attention_forward(a, half_rows(q, pair.q_half, c), kv.k(pair.k_half, c), kv.v(pair.k_half, c), part_out,
                          part_lse);
        attention_merge(out_half, lse_half, part_out, part_lse);
      }
    }
    if (transfer) {
      transfer->wait();
      std::swap(kv, next);
    }
  }
}

void ring_attention_backward(const ContextParallel& cp, const AttentionArgs& args, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& grad_out,
                             Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) {
  if (cp.size() == 1) return attention_backward(args, q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v);
  const int n = cp.size(), r = cp.rank();
  const int64_t B = q.size(0), Hq = q.size(1), c = q.size(2) / 2;
  const ops::Placement p = ops::placement_of(q, "q");
  PackedKv kv = pack(p, k, v), next{p.empty(kv.data.shape())};
  const Tensor lse_halves = lse.view({2, B, Hq, c});
  // This step's K/V gradients from this rank's queries (two alternating buffers: the previous
  // step's is still being sent), and the running sum arriving from the previous rank.
  PackedKv grads[2] = {{p.empty(kv.data.shape())}, {p.empty(kv.data.shape())}};
  PackedKv arriving{p.empty(kv.data.shape())};
  std::unique_ptr<RingTransfer> grads_transfer;
  for (int s = 0; s < n; ++s) {
    const int src = (r - s + n) % n;
    std::unique_ptr<RingTransfer> transfer = s + 1 < n ? cp.ring_shift(kv.data, next.data, kKvTag) : nullptr;
    PackedKv& mine = grads[s % 2];
    if (s > 0) zero(mine.data);  // step 0's diagonal pairs write both halves
    for (const Pair& pair : kPairs) {
      const int64_t qi = cp.chunk_index(pair.q_half), ki = chunk_of(src, pair.k_half, n);
      const bool writes = s == 0 && pair.q_half == pair.k_half;
      if (!writes && !pair_visible(args, qi, ki, c)) continue;
      AttentionArgs a = pair_args(args, qi, ki, c);
      a.accumulate = !writes;
      Tensor gq = grad_q.defined() ? half_rows(grad_q, pair.q_half, c) : Tensor();
      Tensor gk = mine.k(pair.k_half, c), gv = mine.v(pair.k_half, c);
      attention_backward(a, half_rows(q, pair.q_half, c), kv.k(pair.k_half, c), kv.v(pair.k_half, c),
                         half_rows(out, pair.q_half, c), lse_halves.select(0, pair.q_half),
                         half_rows(grad_out, pair.q_half, c), gq, gk, gv);
    }
    if (grads_transfer) {  // the sum over the ranks before this one, for the same K/V
      grads_transfer->wait();
      add_into(mine.data, arriving.data);
    }
    grads_transfer = cp.ring_shift(mine.data, arriving.data, kGradTag);
    if (transfer) {
      transfer->wait();
      std::swap(kv, next);
    }
  }
  grads_transfer->wait();  // this rank's own K/V gradients, summed over every rank's queries
  const Tensor dk = arriving.data.select(0, 0), dv = arriving.data.select(0, 1);
  if (grad_k.defined()) copy(dk, grad_k);
  if (grad_v.defined()) copy(dv, grad_v);
}

}  // namespace myriad::nn
