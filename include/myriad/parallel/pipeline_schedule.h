// Pipeline-parallel schedules as data, and a checker that runs them without a model.
//
// p pipeline ranks (stages), m micro-batches, v model chunks per rank (virtual stages; v > 1 only
// for the interleaved schedule). Chunk c on rank r is global stage g = c * p + r (Megatron's
// interleaving: rank r holds stages r, r + p, r + 2p, ...); g runs from 0 to p * v - 1. A schedule
// is one ordered list of actions per rank; an executor runs its rank's list top to bottom.
//
// Communication is explicit: every forward on a global stage g > 0 is preceded by its
// recv_activation from the rank of g - 1, every forward with g < p * v - 1 is followed by a
// send_activation to the rank of g + 1; a backward with g < p * v - 1 is preceded by its
// recv_gradient from the rank of g + 1, and one with g > 0 is followed by a send_gradient to the
// rank of g - 1. In a send or recv, `chunk` is this rank's chunk (the one that produced or will
// consume the tensor); the peer's chunk follows from the global stage (g +- 1) / p.
//
// Time model of simulate_schedule, in which the bubble formulas below are exact: every chunk
// forward takes 1 and every chunk backward `backward_cost` (b), the same on every rank and for every
// micro-batch; communication takes no time; sends are buffered (never block); a recv waits until
// the peer has issued the matching send. Then, for ANY b > 0 (not only b = 1),
//   GPipe and 1F1B:         idle fraction = (p - 1) / (m + p - 1)       makespan (m + p - 1)(1 + b)
//   interleaved, v chunks:  idle fraction = (p - 1) / (v m + p - 1)     makespan (v m + p - 1)(1 + b)
// with idle fraction = sum over ranks of (makespan - busy time) / (p * makespan). The tests assert
// this within 1e-12 for b = 1 and b = 2 at p in {2, 4, 8}, m in {p, 2p, 4p}; it also held in a sweep
// of p 1..9, m 1..40, v 1..4, b from 0.1 to 13. Not modelled: unequal stages (embedding on the
// first, head and loss on the last), transfer time, sends that block.
// Peak in-flight forwards (done, backward not yet) on rank r: GPipe m; 1F1B min(p - r, m);
// interleaved min(2 (p - r - 1) + (v - 1) p + 1, m v) chunk forwards (each holds 1/v of a stage's
// layers' activations).
#pragma once

#include <string>
#include <vector>

#include "myriad/core/step_modes.h"

namespace myriad::parallel {

// The schedule kind is myriad::PipelineSchedule (core/step_modes.h, spelled "1f1b", "gpipe",
// "interleaved"), the same enum the config's parallel.pp_schedule holds.

struct PipelineAction {
  enum Type { forward, backward, send_activation, recv_activation, send_gradient, recv_gradient };
  Type type = forward;
  int micro_batch = 0;
  int chunk = 0;  // virtual stage index on this rank, 0..v-1
  int peer = -1;  // pipeline rank for send / recv, else -1
  bool operator==(const PipelineAction&) const = default;
};
const char* action_name(PipelineAction::Type type);
// "forward(micro-batch 2, chunk 0)", "send_activation(micro-batch 2, chunk 0) to rank 1".
std::string describe(const PipelineAction& action);

// Throws naming the values unless p >= 1, m >= 1, v >= 1, v == 1 unless interleaved, and for
// interleaved p >= 2 and m % p == 0.
//   gpipe:        forwards of micro-batches 0..m-1, then their backwards in the same order.
//   one_f_one_b:  w = min(p - r - 1, m) warm-up forwards, then (forward w + i, backward i) pairs,
//                 then the w remaining backwards (PipeDream-flush, Megatron non-interleaved).
//   interleaved:  Megatron's interleaved 1F1B: the k-th forward on a rank is chunk (k / p) % v of
//                 micro-batch (k / (p v)) p + k % p, the k-th backward the same with chunk
//                 v - 1 - (k / p) % v; w = min(2 (p - r - 1) + (v - 1) p, m v) warm-up forwards,
//                 then 1F1B pairs, then the remaining backwards (v = 1 is accepted: 1F1B with
//                 a deeper warm-up).
// One list per pipeline rank, indexed [rank][step].
std::vector<std::vector<PipelineAction>> build_schedule(PipelineSchedule kind, int stages, int micro_batches,
                                                        int virtual_stages);

struct ScheduleCheck {
  bool ok = false;
  std::string problem;              // empty when ok; else names the rank, action and micro-batch
  double idle_fraction = 0.0;       // sum over ranks of (makespan - busy) / (ranks * makespan)
  double makespan = 0.0;            // in forward times
  int steps = 0;                    // makespan in whole time slots (rounded up)
  std::vector<int> peak_in_flight;  // per rank: max forwards done whose backward is not done yet
  // Every rank receives from each peer in the order that peer sent to it, so an executor may
  // match messages by (peer) alone on an in-order channel instead of by (peer, micro-batch, chunk).
  bool fifo_per_peer = false;
};

// Runs the schedule under the time model above (forward 1, backward `backward_cost` > 0). Checks
// that every action is well formed (micro-batch, chunk, peer of the global stage, no send past the
// ends), that a forward on g > 0 follows its recv_activation, a backward follows its forward (and
// its recv_gradient below the last stage), a send follows the compute that produces it, that each
// rank runs every (micro-batch, chunk) forward and backward exactly once, that every send is
// received exactly once and every recv sent exactly once, and that no rank gets stuck (deadlock or
// a recv with no send: the problem lists each stuck rank and what it waits for). Throws only for
// bad arguments (sizes, schedule.size() != stages); a bad schedule gives ok == false.
ScheduleCheck simulate_schedule(const std::vector<std::vector<PipelineAction>>& schedule, int stages, int micro_batches,
                                int virtual_stages, double backward_cost = 2.0);

// The formula the measured idle fraction is compared with: (p-1)/(m+p-1), or (p-1)/(v m+p-1).
double bubble_formula(PipelineSchedule kind, int stages, int micro_batches, int virtual_stages);

}  // namespace myriad::parallel
