// Internal: which worker reads which corpus file (myriad-data tokenize and dedup) — largest file
// first to the least loaded worker (ties: the lower file index, the lower worker), so every
// worker computes the same assignment from the same file list.
#pragma once

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

namespace myriad::data::detail {

inline std::vector<int> assign_files(const std::vector<std::string>& files, int workers) {
  std::vector<std::int64_t> size(files.size());
  for (std::size_t f = 0; f < files.size(); ++f) {
    std::error_code error;
    const auto bytes = std::filesystem::file_size(files[f], error);
    size[f] = error ? 0 : static_cast<std::int64_t>(bytes);
  }
  std::vector<std::size_t> order(files.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return size[a] > size[b]; });
  std::vector<std::int64_t> load(static_cast<std::size_t>(workers), 0);
  std::vector<int> owner(files.size(), 0);
  for (std::size_t f : order) {
    const auto least = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[f] = least;
    load[static_cast<std::size_t>(least)] += size[f] + 1;
  }
  return owner;
}

}  // namespace myriad::data::detail
