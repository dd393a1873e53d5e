// The job store's queue (serve/store.h): the highest priority first and FIFO within one, a suspended job back at its
// place with its progress, a resumed one not counted as a new attempt, the videos of a job and all their files
// removed with it, and a store made before priorities and videos opened with them added.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "serve/store.h"
#include "support/scratch_dir.h"

namespace {

using h3::serve::JobRecord;
using h3::serve::JobStore;
using json = nlohmann::json;

std::string add(JobStore& s, int priority, int n = 1) {
  json videos = json::array();
  for (int k = 0; k < n; ++k) videos.push_back({{"index", k}, {"seed", 10 + k}, {"status", "queued"}, {"bytes", 0}});
  return s.insert(json::object(), {{"seed", 10}}, 100, priority, videos)->id;
}

void touch(const std::string& path) {
  std::ofstream(path) << "x";
}

}  // namespace

TEST(ServeStore, HighestPriorityFirstThenFifo) {
  h3::test::ScratchDir dir;
  JobStore s(dir.path().string());
  const std::string a = add(s, 0), b = add(s, 0), c = add(s, 5), d = add(s, 5);
  EXPECT_EQ(s.next_queued()->id, c);
  EXPECT_EQ(s.queue_position(*s.get(c)), 1);
  EXPECT_EQ(s.queue_position(*s.get(d)), 2);
  EXPECT_EQ(s.queue_position(*s.get(a)), 3);
  EXPECT_EQ(s.queue_position(*s.get(b)), 4);
  const auto ahead = s.queued_ahead(*s.get(a));
  ASSERT_EQ(ahead.size(), 2u);
  EXPECT_EQ(ahead[0].id, c);
  EXPECT_EQ(*s.top_queued_priority(), 5);
  // a runs (say it was started before c and d came), is suspended after some progress: queued again, progress kept,
  // ahead of b; its resume is no new attempt.
  ASSERT_TRUE(s.mark_running(a));
  ASSERT_TRUE(s.update_progress(a, "denoise", 3, 10, 30.0, 20.0));
  ASSERT_TRUE(s.suspend(a));
  JobRecord ra = *s.get(a);
  EXPECT_EQ(ra.status, "queued");
  EXPECT_EQ(ra.preemptions, 1);
  EXPECT_EQ(ra.step, 3);
  EXPECT_DOUBLE_EQ(ra.progress, 30.0);
  EXPECT_EQ(s.queue_position(ra), 3);  // behind c and d, ahead of b
  EXPECT_EQ(s.count_suspended(), 1);
  ASSERT_TRUE(s.mark_running(a));
  ra = *s.get(a);
  EXPECT_EQ(ra.attempts, 1);
  EXPECT_EQ(ra.step, 3);
  EXPECT_EQ(ra.phase, "denoise");
}

TEST(ServeStore, VideosAndTheirFilesGoWithTheJob) {
  h3::test::ScratchDir dir;
  JobStore s(dir.path().string());
  const std::string a = add(s, 0, 3), other = add(s, 0);
  EXPECT_EQ(s.output_path(a, 0), (dir.path() / "outputs" / (a + ".mp4")).string());
  EXPECT_EQ(s.output_path(a, 2), (dir.path() / "outputs" / (a + "-2.mp4")).string());
  ASSERT_TRUE(s.mark_running(a));
  json v = s.get(a)->videos;
  ASSERT_EQ(v.size(), 3u);
  v[1]["status"] = "completed";
  v[1]["bytes"] = 1;
  ASSERT_TRUE(s.update_videos(a, v));
  const JobRecord r = *s.get(a);
  EXPECT_EQ(r.n(), 3);
  EXPECT_FALSE(r.video_ready(0));
  EXPECT_TRUE(r.video_ready(1));
  for (int k = 0; k < 3; ++k) touch(s.output_path(a, k));
  touch(s.preview_path(a));
  touch(s.output_path(a, 1) + ".partial");
  touch(s.output_path(other));
  EXPECT_EQ(s.remove_partials(a), 1);
  ASSERT_TRUE(s.finish(a, "completed", "", "", 1, json::object()));
  ASSERT_TRUE(s.remove(a));
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "outputs"))
    EXPECT_EQ(e.path().filename().string().rfind(a, 0), std::string::npos) << e.path();
  EXPECT_TRUE(std::filesystem::exists(s.output_path(other)));
}

// A store of the first release (no priority, videos or preemptions columns) gets them; its rows read as one video
// of priority 0.
TEST(ServeStore, OldStoresGainTheNewColumns) {
  h3::test::ScratchDir dir;
  std::filesystem::create_directories(dir.path());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() / "jobs.sqlite3").c_str(), &db), SQLITE_OK);
  const char* old_schema =
      "CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, status TEXT NOT NULL,"
      " request TEXT NOT NULL, resolved TEXT NOT NULL, phase TEXT NOT NULL DEFAULT '', progress REAL NOT NULL DEFAULT "
      "0,"
      " eta_s REAL NOT NULL DEFAULT -1, step INTEGER NOT NULL DEFAULT 0, steps INTEGER NOT NULL DEFAULT 0,"
      " error TEXT NOT NULL DEFAULT '', error_code TEXT NOT NULL DEFAULT '', attempts INTEGER NOT NULL DEFAULT 0,"
      " cancel_requested INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, started_at REAL NOT NULL DEFAULT 0,"
      " finished_at REAL NOT NULL DEFAULT 0, output_bytes INTEGER NOT NULL DEFAULT 0, result TEXT NOT NULL DEFAULT "
      "'{}');"
      "INSERT INTO jobs (id, status, request, resolved, created_at, output_bytes) VALUES"
      " ('video_0123456789abcdef01234567', 'completed', '{}', '{}', 1, 5);";
  ASSERT_EQ(sqlite3_exec(db, old_schema, nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  JobStore s(dir.path().string());
  const JobRecord r = *s.get("video_0123456789abcdef01234567");
  EXPECT_EQ(r.priority, 0);
  EXPECT_EQ(r.n(), 1);
  EXPECT_TRUE(r.video_ready(0));
  EXPECT_EQ(r.preemptions, 0);
  EXPECT_EQ(s.next_queued(), std::nullopt);
  const std::string b = add(s, 2);
  EXPECT_EQ(s.next_queued()->id, b);
}
