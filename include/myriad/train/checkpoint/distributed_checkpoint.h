// Writing one sharded checkpoint from many ranks (checkpoint.h): each rank holding a distinct
// part of the state writes its own data file, rank 0 writes the manifest once all are written.
//
// write_checkpoint_collectively is collective over `comm` (all ranks call it; it may run in a
// background thread if `comm` is used by nothing else meanwhile). The temporary directory must
// exist (begin_checkpoint on rank 0, before). Ranks with `pieces` write <tmp>/rank_<R>.bin;
// their manifest entries go to rank 0, which finishes the checkpoint. A failure on any rank
// (disk full, permissions) fails the call on every rank, naming the rank: the checkpoint then
// never appears and the previous one stays `latest`.
#pragma once

#include <string>
#include <vector>

#include "myriad/distributed/communicator.h"
#include "myriad/train/checkpoint/checkpoint.h"

namespace myriad::train {

std::string write_checkpoint_collectively(distributed::Communicator& comm, const std::string& dir,
                                          const CheckpointHeader& header, const std::vector<CheckpointPiece>* pieces,
                                          int keep, const data::AtRest& at_rest);

}  // namespace myriad::train
