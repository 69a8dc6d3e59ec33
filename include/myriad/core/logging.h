// Per-rank loggers built on spdlog.
//
// Every line carries "[rank N]" so interleaved output of many ranks stays readable. Loggers are
// objects owned by whoever logs (the engine, a tool, a benchmark) and are not registered in
// spdlog's global registry. Level comes from the argument ("trace".."critical", "off").
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace myriad {

// Console logger (stderr) for `rank`; when `file_path` is non-empty, also appends to that file.
std::shared_ptr<spdlog::logger> make_rank_logger(int rank, const std::string& level = "info",
                                                 const std::string& file_path = "");

// A logger that writes what `log` (made by make_rank_logger) writes, but to its file only: for long
// records such as the resolved config, which belong in the log file and not on the console. Writes
// nothing when `log` has no file.
std::shared_ptr<spdlog::logger> file_only_logger(const spdlog::logger& log);

}  // namespace myriad
