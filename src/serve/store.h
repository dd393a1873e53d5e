// The server's durable job queue: one SQLite database and an outputs folder inside the store directory
// (`h3 serve --store DIR`). The queue runs the highest priority first and, within a priority, FIFO by insertion
// sequence; a job keeps its sequence when it is requeued after a restart or suspended for a job of higher priority, so
// it runs before anything of its priority submitted later. Every path the server reads or writes
// is derived from the store directory and a job id the server generated itself; nothing a client sends
// becomes a path.
#pragma once
#include <sqlite3.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <shared_mutex>
#include <string>
#include <variant>
#include <vector>

namespace h3::serve {

// Job status values as the API reports them.
inline constexpr const char* kQueued = "queued";
inline constexpr const char* kRunning = "in_progress";
inline constexpr const char* kCompleted = "completed";
inline constexpr const char* kFailed = "failed";
inline constexpr const char* kCancelled = "cancelled";
bool is_terminal(const std::string& status);

struct JobRecord {
  int64_t seq = 0;
  std::string id;
  std::string status;
  nlohmann::json request;   // the client's body as accepted
  nlohmann::json resolved;  // the parameters that run (seed fixed)
  std::string phase;
  double progress = 0;  // 0..100
  double eta_s = -1;
  int step = 0, steps = 0;
  std::string error, error_code;
  int attempts = 0;
  bool cancel_requested = false;
  double created_at = 0, started_at = 0, finished_at = 0;  // unix seconds, 0 = not yet
  int64_t output_bytes = 0;                                // > 0 when the MP4 is in the store
  nlohmann::json result;                                   // timings, tokens, latents file (completed jobs)
  std::string damaged;  // non-empty when a stored JSON column did not parse (which one); the job cannot run
  int priority = 0;     // higher runs first (0 .. kMaxPriority)
  // The job's videos (`n` of them): [{index, seed, status (queued | completed | failed), bytes}], in index order;
  // empty for a record from before `n` (one video: the job's own status and output_bytes).
  nlohmann::json videos;
  int preemptions = 0;  // times the job was suspended for a job of higher priority
  int n() const { return videos.is_array() && !videos.empty() ? static_cast<int>(videos.size()) : 1; }
  // Whether video `index` is in the store (completed): its entry, or for a record without entries the job's status.
  bool video_ready(int index) const;
};

inline constexpr int kMaxVideos = 8;  // `n` per job
inline constexpr int kMaxPriority = 100;

class JobStore {
 public:
  // Opens (creating) DIR/jobs.sqlite3 and DIR/outputs, holding DIR/lock for the store's life: a second server
  // on the same store is refused. A damaged database is refused with what to do. Throws h3::Error naming the
  // file on failure. Every later operation throws h3::Error when SQLite fails (disk full, I/O error): the
  // caller decides what that means for the job; the store stays usable.
  explicit JobStore(const std::string& dir);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  const std::string& dir() const { return dir_; }
  // Where a job's files live: outputs/<id>.mp4 for its first video, outputs/<id>-<k>.mp4 for video k > 0 (and
  // .latents.safetensors beside each with --write-latents; thumbnails made on request), outputs/<id>.preview.png the
  // latest preview.
  std::string output_path(const std::string& id, int index = 0) const;
  std::string preview_path(const std::string& id) const;
  // Removes a job's unfinished files (`.partial` of the MP4s and the latents) and returns how many there were.
  int remove_partials(const std::string& id);
  // Removes every `.partial` file in outputs/ (at start-up nothing is being written).
  int sweep_partials();

  // Inserts a queued job unless `max_queued` jobs are already queued (then returns nullopt). `videos` as in JobRecord.
  std::optional<JobRecord> insert(const nlohmann::json& request, const nlohmann::json& resolved, int64_t max_queued,
                                  int priority = 0, const nlohmann::json& videos = nlohmann::json::array());
  std::optional<JobRecord> get(const std::string& id);
  // Newest first when `descending`; `after_seq` continues a page (exclusive); `status` filters when
  // non-empty.
  std::vector<JobRecord> list(int64_t limit, std::optional<int64_t> after_seq, bool descending,
                              const std::string& status);
  // The queued job to run next: the highest priority, then the lowest sequence.
  std::optional<JobRecord> next_queued();
  int64_t count(const std::string& status);
  // 1 + the number of queued jobs that run before `r` (a higher priority, or the same and an earlier sequence).
  int64_t queue_position(const JobRecord& r);
  // Those jobs, in the order they run.
  std::vector<JobRecord> queued_ahead(const JobRecord& r);
  // The highest priority among queued jobs (nullopt: none queued), and how many queued jobs were suspended.
  std::optional<int> top_queued_priority();
  int64_t count_suspended();

  // Transitions; each returns false when the job is not in the state the transition starts from.
  bool mark_running(const std::string& id);
  bool update_progress(const std::string& id, const std::string& phase, int step, int steps, double progress,
                       double eta_s);
  bool request_cancel(const std::string& id);  // running jobs: remember that a cancel was asked for
  bool cancel_queued(const std::string& id);
  bool finish(const std::string& id, const std::string& status, const std::string& error_code, const std::string& error,
              int64_t output_bytes, const nlohmann::json& result);
  bool requeue(const std::string& id);  // a running job back to the queue (shutdown)
  // A running job stopped at a step boundary for one of higher priority: queued again at its place, its progress
  // kept, preemptions + 1.
  bool suspend(const std::string& id);
  // The running job's videos as they finish.
  bool update_videos(const std::string& id, const nlohmann::json& videos);
  // Deletes a job that is not running, with its files. False when unknown or running. Waits while the job's files
  // are held (hold_files).
  bool remove(const std::string& id);
  // Keeps job `id`'s files as they are while the holder reads them, makes a picture from them or opens one: remove()
  // waits until the hold ends. A holder that finds the job's row (get) therefore finds its files, and a file it
  // makes meanwhile is removed with the job, never left behind. (Without it a thumbnail asked for while its video
  // was deleted failed on the vanished MP4 with 500, and a poster written after the delete stayed in outputs/.)
  std::shared_lock<std::shared_mutex> hold_files(const std::string& id);

  // After a restart: every job left running is requeued if it has run fewer than `max_attempts` times, else
  // failed with a reason. Returns the ids touched.
  std::vector<std::string> recover(int max_attempts);

  // Small key/value table (the model limits last reported by the rank group).
  void put_meta(const std::string& key, const std::string& value);
  std::optional<std::string> get_meta(const std::string& key);

 private:
  void exec(const char* sql);
  using Arg = std::variant<int64_t, double, std::string>;
  std::vector<JobRecord> query(const std::string& sql, const std::vector<Arg>& args);
  int changes(const std::string& sql, const std::vector<Arg>& args);
  // UPDATE jobs SET `set` (its ? bound to `args`) on job `id` while it is in progress; false when it is not.
  bool update_running(const std::string& id, const std::string& set, std::vector<Arg> args);
  std::string dir_;
  sqlite3* db_ = nullptr;
  int lock_fd_ = -1;
  std::mutex mu_;
  // hold_files / remove: a lock per group of ids (a delete waits only for holders of ids in its group). Taken
  // before mu_, never while holding it.
  std::array<std::shared_mutex, 16> files_mu_;
  std::shared_mutex& files_mu(const std::string& id);
};

double unix_now();
// JSON text with any invalid UTF-8 replaced (error texts may carry bytes from anywhere).
std::string dump_json(const nlohmann::json& j);
std::string new_job_id();
bool valid_job_id(const std::string& id);

}  // namespace h3::serve
