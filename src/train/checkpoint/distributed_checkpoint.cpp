// write_checkpoint_collectively: per-rank files, agreement on failure, manifest on rank 0.
#include "myriad/train/checkpoint/distributed_checkpoint.h"

#include <filesystem>

#include "myriad/distributed/scalar_reduce.h"

namespace myriad::train {

std::string write_checkpoint_collectively(distributed::Communicator& comm, const std::string& dir,
                                          const CheckpointHeader& header, const std::vector<CheckpointPiece>* pieces,
                                          int keep, const data::AtRest& at_rest) {
  std::string final_path = checkpoint_path(dir, header.step);  // not const: moved out by the return
  const std::string tmp =
      (std::filesystem::path(dir) / (".tmp-" + std::filesystem::path(final_path).filename().string())).string();
  std::string entries;
  distributed::run_on_every_rank(comm, "checkpoint data file write", [&] {
    if (pieces != nullptr)
      entries = write_checkpoint_file(tmp, "rank_" + std::to_string(comm.rank()) + ".bin", *pieces, at_rest);
  });
  const std::vector<std::string> all = distributed::gather_strings_to_rank0(comm, entries);
  distributed::run_on_rank0(comm, "checkpoint manifest", [&] {
    std::vector<std::string> files;
    for (const std::string& e : all) {
      if (!e.empty()) files.push_back(e);
    }
    finish_checkpoint(dir, tmp, header, files, keep, at_rest);
  });
  return final_path;
}

}  // namespace myriad::train
