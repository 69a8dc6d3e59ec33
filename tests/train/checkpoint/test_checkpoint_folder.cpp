// The checkpoint folder: the resume point (also when `latest` dangles), retention by write time
// that never deletes what `latest` names, and the refusal of a fresh run into another run's folder.
#include "myriad/train/checkpoint/checkpoint_folder.h"

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

// A complete checkpoint directory of `step` whose manifest was written `age_seconds` ago.
void make_checkpoint(const fs::path& dir, const std::string& name, int age_seconds) {
  fs::create_directories(dir / name);
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
