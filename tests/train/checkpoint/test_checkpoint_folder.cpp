// The checkpoint folder: the resume point (also when `latest` dangles), retention by write time
// that never deletes what `latest` names, and the refusal of a fresh run into another run's folder.
#include "myriad/train/checkpoint/checkpoint_folder.h"
#include "myriad/train/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace myriad::train {
namespace {

namespace fs = std::filesystem;

fs::path fresh(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("myriad_ckfolder_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A complete checkpoint directory of `step` whose manifest was written `age_seconds` ago, with the
// marker myriad writes into its own checkpoint folders.
void make_checkpoint(const fs::path& dir, const std::string& name, int age_seconds) {
  fs::create_directories(dir / name);
  std::ofstream(dir / name / kCheckpointMarker) << "myriad";
  std::ofstream(dir / name / "manifest.json") << "{}";
  fs::last_write_time(dir / name / "manifest.json",
                      fs::file_time_type::clock::now() - std::chrono::seconds(age_seconds));
}

void point_latest(const fs::path& dir, const std::string& name) { std::ofstream(dir / "latest") << name << "\n"; }

TEST(CheckpointFolder, ListsOnlyCompleteCheckpointsByStep) {
  const fs::path dir = fresh("list");
  make_checkpoint(dir, "step_00000020", 10);
  make_checkpoint(dir, "step_00000003", 20);
  fs::create_directories(dir / "step_00000030");       // no manifest: incomplete
  fs::create_directories(dir / ".tmp-step_00000040");  // a save in progress
  make_checkpoint(dir, "step_notanumber", 5);
  const auto found = list_checkpoints(dir.string());
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].step, 3);
  EXPECT_EQ(found[1].step, 20);
  EXPECT_TRUE(list_checkpoints((dir / "absent").string()).empty());
  fs::remove_all(dir);
}

TEST(CheckpointFolder, ResumeFallsBackToTheNewestCompleteCheckpointAndSaysSo) {
  const fs::path dir = fresh("resume");
  EXPECT_EQ(find_resume_point(dir.string()).path, "");
  make_checkpoint(dir, "step_00000100", 30);
  make_checkpoint(dir, "step_00000200", 20);
  point_latest(dir, "step_00000200");
  ResumePoint point = find_resume_point(dir.string());
  EXPECT_EQ(point.path, (dir / "step_00000200").string());
  EXPECT_EQ(point.note, "");
  // The newest checkpoint deleted by hand: `latest` dangles, the step-100 one is taken, with a note.
  fs::remove_all(dir / "step_00000200");
  point = find_resume_point(dir.string());
  EXPECT_EQ(point.path, (dir / "step_00000100").string());
  EXPECT_NE(point.note.find("names step_00000200, which is missing"), std::string::npos) << point.note;
  EXPECT_NE(point.note.find("step_00000100"), std::string::npos) << point.note;
  // No pointer at all.
  fs::remove(dir / "latest");
  point = find_resume_point(dir.string());
  EXPECT_EQ(point.path, (dir / "step_00000100").string());
  EXPECT_NE(point.note.find("no 'latest' pointer"), std::string::npos) << point.note;
  fs::remove_all(dir);
}

TEST(CheckpointFolder, RetentionKeepsTheNewestWrittenAndWhatLatestNames) {
  const fs::path dir = fresh("retention");
  // An older run's high steps, written earlier, and this run's low step, written now.
  make_checkpoint(dir, "step_00000500", 300);
  make_checkpoint(dir, "step_00000600", 200);
  make_checkpoint(dir, "step_00000100", 0);
  point_latest(dir, "step_00000100");
  apply_retention(dir.string(), 2);
  EXPECT_TRUE(fs::exists(dir / "step_00000100")) << "the checkpoint just written was deleted";
  EXPECT_TRUE(fs::exists(dir / "step_00000600"));
  EXPECT_FALSE(fs::exists(dir / "step_00000500"));
  // `latest` is never deleted, even when it is not among the newest written.
  point_latest(dir, "step_00000600");
  make_checkpoint(dir, "step_00000110", 0);
  apply_retention(dir.string(), 1);
  EXPECT_TRUE(fs::exists(dir / "step_00000600"));
  EXPECT_TRUE(fs::exists(dir / "step_00000110"));
  EXPECT_FALSE(fs::exists(dir / "step_00000100"));
  fs::remove_all(dir);
}

TEST(CheckpointFolder, CleanUpAndRetentionNeverDeleteAUsersOwnFolders) {
  const fs::path dir = fresh("users");
  // The user's own folders under myriad's names: a step_ folder with their own manifest.json, a
  // step_ folder of files, a .tmp-step_ folder of notes.
  fs::create_directories(dir / "step_00000001");
  std::ofstream(dir / "step_00000001" / "manifest.json") << "{\"mine\": true}";
  fs::create_directories(dir / "step_00000002");
  std::ofstream(dir / "step_00000002" / "notes.txt") << "keep me";
  fs::create_directories(dir / ".tmp-step_00000009");
  std::ofstream(dir / ".tmp-step_00000009" / "draft.txt") << "keep me too";
  fs::last_write_time(dir / "step_00000001" / "manifest.json",
                      fs::file_time_type::clock::now() - std::chrono::seconds(1000));
  // Two of myriad's, and a stale temporary folder of a killed save (marked).
  make_checkpoint(dir, "step_00000010", 20);
  make_checkpoint(dir, "step_00000020", 10);
  fs::create_directories(dir / ".tmp-step_00000030");
  std::ofstream(dir / ".tmp-step_00000030" / kCheckpointMarker) << "myriad";
  point_latest(dir, "step_00000020");
  apply_retention(dir.string(), 1);
  EXPECT_TRUE(fs::exists(dir / "step_00000001" / "manifest.json"));  // not myriad's: kept
  EXPECT_TRUE(fs::exists(dir / "step_00000002" / "notes.txt"));
  EXPECT_FALSE(fs::exists(dir / "step_00000010"));  // myriad's, beyond keep: deleted
  EXPECT_TRUE(fs::exists(dir / "step_00000020"));
  EXPECT_FALSE(written_by_myriad((dir / "step_00000001").string()));
  EXPECT_TRUE(written_by_myriad((dir / "step_00000020").string()));
  // A save: removes only the marked stale folder, and refuses to replace the user's step_00000002.
  const std::string tmp = begin_checkpoint(dir.string(), 2);
  EXPECT_FALSE(fs::exists(dir / ".tmp-step_00000030"));
  EXPECT_TRUE(fs::exists(dir / ".tmp-step_00000009" / "draft.txt"));
  CheckpointHeader header;
  header.step = 2;
  try {
    finish_checkpoint(dir.string(), tmp, header, {}, 3, {});
    ADD_FAILURE() << "a save replaced the user's step_00000002";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step_00000002 exists and was not written by myriad"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::exists(dir / "step_00000002" / "notes.txt"));
  // A .tmp-step_ folder of the user's under the name a save needs is refused too, and kept.
  try {
    begin_checkpoint(dir.string(), 9);
    ADD_FAILURE() << "a save wrote into the user's .tmp-step_00000009";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(".tmp-step_00000009 exists and was not made by myriad"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::exists(dir / ".tmp-step_00000009" / "draft.txt"));
  fs::remove_all(dir);
}

TEST(CheckpointFolder, AFreshRunIntoAnotherRunsFolderIsRefusedNamingIt) {
  const fs::path dir = fresh("conflict");
  EXPECT_EQ(fresh_run_conflict((dir / "not_yet").string()), "");
  EXPECT_EQ(fresh_run_conflict(dir.string()), "");
  fs::create_directories(dir / ".tmp-step_00000010");  // an interrupted save is no run
  EXPECT_EQ(fresh_run_conflict(dir.string()), "");
  make_checkpoint(dir, "step_00000600", 0);
  const std::string why = fresh_run_conflict(dir.string());
  EXPECT_NE(why.find(dir.string()), std::string::npos) << why;
  EXPECT_NE(why.find("step 600"), std::string::npos) << why;
  EXPECT_NE(why.find("--resume auto"), std::string::npos) << why;
  EXPECT_NE(why.find("logging.dir"), std::string::npos) << why;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace myriad::train
