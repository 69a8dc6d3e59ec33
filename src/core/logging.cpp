// Rank-prefixed spdlog loggers (stderr sink, optional file sink). Only rank 0 writes info-level
// lines to the console; other ranks write warnings and errors there and everything to their file,
// so a job of many ranks prints one start-up report, not one per rank.
#include "myriad/core/logging.h"

#include <algorithm>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "myriad/core/error.h"

namespace myriad {

std::shared_ptr<spdlog::logger> make_rank_logger(int rank, const std::string& level, const std::string& file_path) {
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!file_path.empty()) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file_path, false));
    } catch (const spdlog::spdlog_ex& e) {
      MYRIAD_THROW("cannot open log file '" << file_path << "': " << e.what());
    }
  }
  auto logger = std::make_shared<spdlog::logger>("rank" + std::to_string(rank), sinks.begin(), sinks.end());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [rank " + std::to_string(rank) + "] [%^%l%$] %v");
  spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  MYRIAD_CHECK(parsed != spdlog::level::off || level == "off",
               "unknown log level '" << level << "'; allowed: trace, debug, info, warn, error, critical, off");
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::warn);  // a warning or error reaches the file before an abort can end the process
  if (rank != 0) sinks.front()->set_level(std::max(parsed, spdlog::level::warn));
  return logger;
}

std::shared_ptr<spdlog::logger> file_only_logger(const spdlog::logger& log) {
  const std::vector<spdlog::sink_ptr>& sinks = log.sinks();
  std::vector<spdlog::sink_ptr> files;
  if (sinks.size() > 1) files.assign(sinks.begin() + 1, sinks.end());  // the console sink comes first
  auto logger = std::make_shared<spdlog::logger>(log.name(), files.begin(), files.end());
  logger->set_level(log.level());
  return logger;
}

}  // namespace myriad
