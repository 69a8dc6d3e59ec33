// CommunicatorWorkers — data::WorkerGroup over a distributed::Communicator (the MPI ranks of a
// myriad-data run): variable-length all-gathers as a size all-gather followed by one of
// zero-padded equal chunks; all-to-all of byte strings as a count all-to-all followed by an
// all_to_all_v of bytes.
#pragma once

#include "myriad/data/worker_group.h"
#include "myriad/distributed/communicator.h"

namespace myriad::train {

class CommunicatorWorkers final : public data::WorkerGroup {
 public:
  explicit CommunicatorWorkers(distributed::Communicator& group) : group_(group) {}

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  std::vector<std::vector<std::int64_t>> all_gather(const std::vector<std::int64_t>& mine) override;
  std::vector<std::string> all_gather_bytes(const std::string& mine) override;
  std::vector<std::string> all_to_all_bytes(const std::vector<std::string>& to) override;
  void barrier() override { group_.barrier(); }

 private:
  std::vector<std::int64_t> gather_sizes(std::int64_t mine);
  distributed::Communicator& group_;
};

}  // namespace myriad::train
