// The checkpoint folder: listing, the resume point, retention and the fresh-run check.
#include "myriad/train/checkpoint/checkpoint_folder.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace myriad::train {

namespace {

// The step of a directory named "step_<digits>", or -1.
std::int64_t step_of(const std::string& name) {
  constexpr std::string_view prefix = "step_";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  std::int64_t step = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// The directory `latest` names ("" when there is no readable pointer).
std::string latest_pointer(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "latest");
  std::string name;
  if (!in || !std::getline(in, name)) return "";
  return name;
}

}  // namespace

std::vector<CheckpointEntry> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointEntry> found;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return found;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::int64_t step = step_of(entry.path().filename().string());
    const fs::path manifest = entry.path() / "manifest.json";
    if (step < 0 || !fs::is_regular_file(manifest, error)) continue;
    const fs::file_time_type written = fs::last_write_time(manifest, error);
    found.push_back({step, entry.path().string(), error ? fs::file_time_type{} : written});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return found;
}

ResumePoint find_resume_point(const std::string& dir) {
  const std::vector<CheckpointEntry> complete = list_checkpoints(dir);
  const std::string named = latest_pointer(dir);
  for (const CheckpointEntry& c : complete) {
    if (!named.empty() && fs::path(c.path).filename() == named) return {c.path, ""};
  }
  if (complete.empty()) return {};
  std::ostringstream note;
  if (named.empty()) {
    note << "no 'latest' pointer in " << dir;
  } else {
    note << "'latest' in " << dir << " names " << named << ", which is missing or incomplete";
  }
  note << "; resuming from the newest complete checkpoint, " << complete.back().path;
  return {complete.back().path, note.str()};
}

void apply_retention(const std::string& dir, int keep) {
  std::vector<CheckpointEntry> complete = list_checkpoints(dir);
  std::sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) {
    return a.written != b.written ? a.written > b.written : a.step > b.step;  // newest first
  });
  const std::string named = latest_pointer(dir);
  const std::size_t kept = static_cast<std::size_t>(std::max(keep, 1));
  for (std::size_t i = kept; i < complete.size(); ++i) {
    if (fs::path(complete[i].path).filename() == named) continue;
    std::error_code error;
    fs::remove_all(complete[i].path, error);
  }
}

std::string fresh_run_conflict(const std::string& dir) {
  const std::vector<CheckpointEntry> complete = list_checkpoints(dir);
  if (complete.empty()) return "";
  std::ostringstream why;
  why << "the checkpoint folder " << dir << " already holds " << complete.size()
      << " checkpoint(s) of another run (newest: step " << complete.back().step
      << "); a fresh run would mix its checkpoints with them. Continue that run with --resume auto "
         "(checkpoint.resume=auto), or start this one in a new folder (logging.dir or checkpoint.dir)";
  return why.str();
}

}  // namespace myriad::train
