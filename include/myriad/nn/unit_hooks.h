// Parameter units and the hooks a model calls around them — what data parallelism and ZeRO attach to.
//
// A unit is a contiguous element range [begin, end) of the ParameterStore's flat layout holding
// whole parameters that are used together: for GptModel unit 0 = embeddings (wte, wpe), units
// 1..L = the blocks, unit L+1 = the final norm and (untied) LM head. The model calls, in order:
//   acquire(u, pass)  before it reads the values of unit u in a forward or backward pass
//                     (nested acquires of one unit are allowed: the tied head uses unit 0);
//   release(u, pass)  when that pass no longer reads them;
//   grads_ready(u)    once the gradients of unit u are final for this micro-batch.
// Forward acquires units 0, 1, …, L+1; backward L+1, L, …, 0 (with unit 0 also acquired from the
// head backward on when embeddings are tied; otherwise unit 0 is acquired as backward_grads).
// Without hooks a model runs exactly as before.
#pragma once

#include <cstdint>
#include <string>

namespace myriad::nn {

struct ParamUnit {
  std::string name;
  std::int64_t begin = 0, end = 0;  // element range in the flat buffers
  // The experts of an MoE block: this rank's expert shard, whose gradients are summed over the
  // ranks holding the same experts (not over every data-parallel rank).
  bool expert = false;
  std::int64_t size() const { return end - begin; }
};

// backward_grads: the pass only writes the unit's gradients (embedding backward), values unread.
enum class Pass { forward, backward, backward_grads };

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void acquire(int unit, Pass pass) = 0;
  virtual void release(int unit, Pass pass) = 0;
  virtual void grads_ready(int unit) = 0;
};

}  // namespace myriad::nn
