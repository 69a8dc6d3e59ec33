// The checkpoint folder: which complete checkpoints it holds, which one `--resume auto` takes,
// which ones retention deletes, and whether a fresh run may write into it.
//
// A complete checkpoint is a directory "step_<8 digits>" holding manifest.json (the manifest is
// written last, inside a temporary directory renamed into place, so a directory with a manifest is
// whole). `latest` names the newest one; when it is missing or names a directory that is gone (the
// newest checkpoint was deleted by hand), the newest complete checkpoint by step is taken instead
// and the choice says so. `--resume auto` also verifies the one it takes (every checksum): a
// damaged checkpoint is passed over for the next newest intact one, with a warning naming it and
// what is wrong; it stays in place for inspection. Retention keeps the newest `keep` by write time (then step), and
// never deletes what `latest` names.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace myriad::train {

struct CheckpointEntry {
  std::int64_t step = 0;
  std::string path;                              // <dir>/step_<8 digits>
  std::filesystem::file_time_type written = {};  // the manifest's write time
};

// Complete checkpoints under `dir`, oldest step first (empty when `dir` does not exist).
std::vector<CheckpointEntry> list_checkpoints(const std::string& dir);

struct ResumePoint {
  std::string path;                  // "" when the folder holds no complete checkpoint
  std::int64_t step = -1;            // of `path`
  std::string note;                  // why this one and not `latest` ("" when `latest` named it)
  std::vector<std::string> damaged;  // newer checkpoints passed over, each "<path>: <what is wrong>"
};
// Says what is wrong with the checkpoint at a path, "" when it is intact (checkpoint_damage in
// checkpoint_reader.h reads every checksum).
using CheckpointDamage = std::function<std::string(const std::string&)>;
// The checkpoint `--resume auto` continues from: the one `latest` names, else the newest complete
// one by step; with `damage`, the first intact one in that order (damaged ones are listed in
// `damaged` and left in place). Throws, naming each checkpoint and its damage, when the folder
// holds complete checkpoints and none is intact.
ResumePoint find_resume_point(const std::string& dir, const CheckpointDamage& damage = nullptr);

// The file myriad writes into every checkpoint folder it creates (the save's temporary folder,
// renamed whole into step_…): clean-up and retention delete only folders that carry it, or whose
// manifest.json is a myriad manifest (checkpoints from before the marker). A user's own folder of
// the same name is never deleted.
inline constexpr const char* kCheckpointMarker = ".myriad-checkpoint";
bool written_by_myriad(const std::string& folder);

// Deletes complete checkpoints beyond the newest `keep` (by write time, then step), sparing the
// one `latest` names and any folder not written_by_myriad; `keep` < 1 counts as 1.
void apply_retention(const std::string& dir, int keep);

// "" when a run starting from step 0 may write checkpoints into `dir`; otherwise why not: the
// folder holds another run's checkpoints, whose retention and `latest` the new run would mix with
// its own (named, with the way out: --resume auto, or another logging.dir / checkpoint.dir).
std::string fresh_run_conflict(const std::string& dir);

}  // namespace myriad::train
