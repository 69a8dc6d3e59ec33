// Which GPU a rank drives: one rank per GPU, chosen from the rank's index among the ranks of its
// node (its local rank), as launchers publish it.
//
// local_rank_from_environment reads, in order, OMPI_COMM_WORLD_LOCAL_RANK (OpenMPI's mpirun),
// MPI_LOCALRANKID (MPICH / Intel MPI), SLURM_LOCALID (srun) and LOCAL_RANK (torchrun-style
// launchers); it returns the first one set, with the variable's name, or nothing when none is.
// A value that is not a non-negative integer is an error naming the variable.
//
// select_local_device maps a local rank to a device ordinal: local rank L uses device L. More
// ranks on a node than visible devices is an error (two ranks on one GPU would share its memory
// and NCCL refuses duplicate GPUs in a communicator); so is a node with no device.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace myriad {

struct LocalRank {
  int value = 0;
  std::string source;  // the environment variable it came from
};

// `getenv` is injectable for tests; the default reads the process environment.
using EnvironmentLookup = std::function<const char*(const char*)>;
std::optional<LocalRank> local_rank_from_environment(const EnvironmentLookup& getenv = {});

// Throws myriad::Error naming the local rank, its source and the device count.
int select_local_device(const std::optional<LocalRank>& local_rank, int device_count);

}  // namespace myriad
