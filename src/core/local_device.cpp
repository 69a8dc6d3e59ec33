// Local rank from the launcher's environment and the GPU it selects (see local_device.h).
#include "myriad/core/local_device.h"

#include <array>
#include <cstdlib>
#include <string_view>

#include "myriad/core/error.h"

namespace myriad {

std::optional<LocalRank> local_rank_from_environment(const EnvironmentLookup& getenv) {
  static constexpr std::array<const char*, 4> kVariables = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                                            "SLURM_LOCALID", "LOCAL_RANK"};
  for (const char* name : kVariables) {
    const char* text = getenv ? getenv(name) : std::getenv(name);
    if (text == nullptr) continue;
    const std::string_view value(text);
    int parsed = 0;
    bool valid = !value.empty() && value.size() <= 9;
    for (char c : value) {
      valid = valid && c >= '0' && c <= '9';
      if (valid) parsed = parsed * 10 + (c - '0');
    }
    MYRIAD_CHECK(valid,
                 "environment variable " << name << "='" << value << "' is not a local rank (a non-negative integer)");
    return LocalRank{parsed, name};
  }
  return std::nullopt;
}

int select_local_device(const std::optional<LocalRank>& local_rank, int device_count) {
  const int rank = local_rank ? local_rank->value : 0;
  const std::string source = local_rank ? local_rank->source : "no launcher variable: a single process";
  MYRIAD_CHECK(device_count > 0, "no CUDA device is visible to this process (local rank "
                                     << rank << " from " << source << "); check CUDA_VISIBLE_DEVICES and the driver");
  MYRIAD_CHECK(rank < device_count, "local rank " << rank << " (from " << source << ") has no GPU of its own: "
                                                  << device_count << " visible on this node, so launch at most "
                                                  << device_count << " ranks per node (one rank per GPU)");
  return rank;
}

}  // namespace myriad
