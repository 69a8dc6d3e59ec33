// WorkerGroup — the collectives the data tools need across processes, as an interface: the data
// layer stays free of MPI, the caller passes MPI ranks (train::CommunicatorWorkers) or a single
// process (SoloWorkers). Every worker calls the same collectives in the same order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace myriad::data {

class WorkerGroup {
 public:
  virtual ~WorkerGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every worker's `mine`, in rank order (each may have a different length).
  virtual std::vector<std::vector<std::int64_t>> all_gather(const std::vector<std::int64_t>& mine) = 0;
  virtual std::vector<std::string> all_gather_bytes(const std::string& mine) = 0;
  // to[d] goes to worker d; returns what each worker sent to this one, in rank order.
  virtual std::vector<std::string> all_to_all_bytes(const std::vector<std::string>& to) = 0;
  virtual void barrier() = 0;
};

// A group of one (no other process).
class SoloWorkers final : public WorkerGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::vector<std::int64_t>> all_gather(const std::vector<std::int64_t>& mine) override { return {mine}; }
  std::vector<std::string> all_gather_bytes(const std::string& mine) override { return {mine}; }
  std::vector<std::string> all_to_all_bytes(const std::vector<std::string>& to) override { return to; }
  void barrier() override {}
};

}  // namespace myriad::data
