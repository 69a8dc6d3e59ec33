// The checkpoint folder: listing, the resume point, retention and the fresh-run check.
#include "myriad/train/checkpoint/checkpoint_folder.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "myriad/core/error.h"

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

ResumePoint find_resume_point(const std::string& dir, const CheckpointDamage& damage) {
  const std::vector<CheckpointEntry> complete = list_checkpoints(dir);
  if (complete.empty()) return {};
  const std::string named = latest_pointer(dir);
  // Candidates: what `latest` names, then the others newest step first.
  std::vector<const CheckpointEntry*> candidates;
  bool latest_found = false;
  for (const CheckpointEntry& c : complete) {
    if (!named.empty() && fs::path(c.path).filename() == named) {
      candidates.insert(candidates.begin(), &c);
      latest_found = true;
    }
  }
  for (auto c = complete.rbegin(); c != complete.rend(); ++c) {
    if (!latest_found || fs::path(c->path).filename() != named) candidates.push_back(&*c);
  }
  ResumePoint point;
  for (const CheckpointEntry* c : candidates) {
    const std::string why = damage ? damage(c->path) : "";
    if (why.empty()) {
      point.path = c->path;
      point.step = c->step;
      break;
    }
    point.damaged.push_back(c->path + ": " + why);
  }
  if (point.path.empty()) {
    std::ostringstream error;
    error << "resume auto: none of the " << complete.size() << " checkpoint(s) in " << dir
          << " is intact (each is left in place):";
    for (const std::string& d : point.damaged) error << "\n  " << d;
    error << "\nRestore one, resume from a checkpoint elsewhere (--resume <dir>), or start fresh in another folder";
    MYRIAD_THROW(error.str());
  }
  std::ostringstream note;
  if (!latest_found) {
    if (named.empty()) {
      note << "no 'latest' pointer in " << dir;
    } else {
      note << "'latest' in " << dir << " names " << named << ", which is missing or incomplete";
    }
  }
  if (!point.damaged.empty()) {
    if (!note.str().empty()) note << "; ";
    note << "passed over " << point.damaged.size() << " damaged checkpoint(s), left in place for inspection: ";
    for (std::size_t i = 0; i < point.damaged.size(); ++i) note << (i ? "; " : "") << point.damaged[i];
  }
  if (!note.str().empty()) {
    note << "; resuming from the newest " << (point.damaged.empty() ? "complete" : "intact") << " checkpoint, "
         << point.path;
  }
  point.note = note.str();
  return point;
}

bool written_by_myriad(const std::string& folder) {
  std::error_code error;
  if (fs::is_regular_file(fs::path(folder) / kCheckpointMarker, error)) return true;
  // Before the marker: a manifest that myriad wrote names its format version near its start.
  std::ifstream in(fs::path(folder) / "manifest.json");
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return head.find("\"format_version\"") != std::string::npos && head.find("\"step\"") != std::string::npos;
}

void apply_retention(const std::string& dir, int keep) {
  std::vector<CheckpointEntry> complete = list_checkpoints(dir);
  std::sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) {
    return a.written != b.written ? a.written > b.written : a.step > b.step;  // newest first
  });
  const std::string named = latest_pointer(dir);
  const std::size_t kept = static_cast<std::size_t>(std::max(keep, 1));
  for (std::size_t i = kept; i < complete.size(); ++i) {
    if (fs::path(complete[i].path).filename() == named || !written_by_myriad(complete[i].path)) continue;
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
