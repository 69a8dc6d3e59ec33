// DecodeGroup — the ranks of a tensor-parallel serving group stepping one model together.
//
// `myriad-serve` under mpirun splits the model over its ranks (tp = their number). Rank 0, the
// leader, runs the HTTP front and the BatchScheduler; before each GptModel::decode it announces
// the step (every sequence's new tokens, start position and block table) over the group's host
// communicator, and every follower runs the same decode on its own shard and its own key/value
// cache (the same block ids: only the leader allocates them), so the collectives inside decode
// meet. Followers hold no requests and sample nothing; they return from follow() when the leader
// stops the group. A decode that throws on a check throws alike on every rank (the checks read
// the same step) and the group goes on; a failed collective ends the job (the communicator's
// abort), never a hang.
//
// Messages (broadcasts from rank 0): an int64 header — the payload's int32 count, 0 = stop — then
// the int32 payload [sequences, then per sequence: new tokens n, start, blocks b, the n tokens,
// the b block ids]. The first message of a group is the cache's shape [block_size, num_blocks].
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/distributed/communicator.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/nn/paged_kv_cache.h"

namespace myriad::serve {

class DecodeGroup {
 public:
  // `control` (not owned): a host communicator over the serving ranks; its rank 0 leads.
  explicit DecodeGroup(distributed::Communicator& control) : control_(control) {}

  bool leader() const { return control_.rank() == 0; }
  int size() const { return control_.size(); }

  // Leader: the cache's shape (once, first), each step before its own decode, and the end.
  void announce_cache(std::int64_t block_size, std::int64_t num_blocks);
  void announce(const std::vector<nn::DecodeSequence>& step);
  void announce_stop();

  // Follower: makes the cache the leader announces, then decodes every announced step on `model`
  // until the leader stops. Returns the number of steps it ran.
  std::int64_t follow(const nn::GptModel& model);

 private:
  void send(const std::vector<std::int32_t>& payload);
  // False at the stop message.
  bool receive(std::vector<std::int32_t>& payload);

  distributed::Communicator& control_;
};

}  // namespace myriad::serve
