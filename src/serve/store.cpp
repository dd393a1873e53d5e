#include "serve/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include "core/error.h"
#include "core/json_limits.h"

namespace h3::serve {

namespace fs = std::filesystem;

bool is_terminal(const std::string& s) {
  return s == kCompleted || s == kFailed || s == kCancelled;
}

bool JobRecord::video_ready(int index) const {
  if (videos.is_array() && !videos.empty()) {
    if (index < 0 || index >= static_cast<int>(videos.size()) || !videos[index].is_object()) return false;
    return videos[index].value("status", "") == kCompleted && videos[index].value("bytes", int64_t{0}) > 0;
  }
  return index == 0 && status == kCompleted && output_bytes > 0;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string new_job_id() {
  // 96 random bits from the kernel; ids are not guessable, so knowing one job's id reveals no other.
  unsigned char b[12] = {0};
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0 && ::read(fd, b, sizeof(b)) == static_cast<ssize_t>(sizeof(b));
  if (fd >= 0) ::close(fd);
  if (!ok) {
    std::random_device rd;
    for (auto& c : b) c = static_cast<unsigned char>(rd());
  }
  std::string id = "video_";
  for (unsigned char c : b) id += fmt::format("{:02x}", c);
  return id;
}

bool valid_job_id(const std::string& id) {
  if (id.size() != 30 || id.rfind("video_", 0) != 0) return false;
  for (size_t i = 6; i < id.size(); ++i)
    if (!std::isxdigit(static_cast<unsigned char>(id[i])) || std::isupper(static_cast<unsigned char>(id[i])))
      return false;
  return true;
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

constexpr const char* kColumns =
    "seq, id, status, request, resolved, phase, progress, eta_s, step, steps, error, error_code, attempts, "
    "cancel_requested, created_at, started_at, finished_at, output_bytes, result, priority, videos, preemptions";
constexpr int kColumnCount = 22;
// The queue's order (next_queued, queue_position): the highest priority, then the lowest sequence.
constexpr const char* kQueueOrder = " ORDER BY priority DESC, seq ASC";

std::string text_col(sqlite3_stmt* st, int i) {
  const unsigned char* t = sqlite3_column_text(st, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}

// A JSON column; `damaged` names the column when its text does not parse (the row stays readable).
nlohmann::json json_col(sqlite3_stmt* st, int i, const char* name, std::string& damaged) {
  std::string s = text_col(st, i);
  if (s.empty()) return nlohmann::json::object();
  try {
    return h3::parse_json_bounded(s, name, 64, false);
  } catch (const h3::Error&) {
    if (damaged.empty()) damaged = name;
    return nlohmann::json::object();
  }
}

}  // namespace

JobStore::JobStore(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "outputs", ec);
  if (ec) fail("--store {}: cannot create the folder: {}", dir, ec.message());
  // One server per store: an advisory lock held while the store is open (released by the kernel when the
  // process dies, so a crashed server leaves nothing to clean up).
  const std::string lock_path = (fs::path(dir) / "lock").string();
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) fail("--store {}: cannot create {}: {}", dir, lock_path, std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {0};
    [[maybe_unused]] ssize_t n = ::pread(lock_fd_, pid, sizeof(pid) - 1, 0);
    ::close(lock_fd_);
    lock_fd_ = -1;
    fail("--store {}: another h3 serve{} is using this store; stop it first, or give this server its own --store", dir,
         pid[0] ? fmt::format(" (pid {})", std::string(pid).substr(0, std::string(pid).find('\n'))) : "");
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd_, 0) == 0) {
    [[maybe_unused]] ssize_t n = ::pwrite(lock_fd_, me.data(), me.size(), 0);
  }
  const std::string db = (fs::path(dir) / "jobs.sqlite3").string();
  const std::string advice = fmt::format(
      "move it aside (mv {0} {0}.damaged) to start with an empty queue (the videos in outputs/ are kept), or "
      "restore it from a backup",
      db);
  if (sqlite3_open_v2(db.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    if (db_) sqlite3_close(db_);
    db_ = nullptr;
    ::close(lock_fd_);
    fail("--store {}: cannot open {}: {}", dir, db, msg);
  }
  sqlite3_busy_timeout(db_, 5000);
  // A damaged database is refused here, with what to do, rather than failing requests one by one later.
  {
    sqlite3_stmt* st = nullptr;
    std::string verdict;
    if (sqlite3_prepare_v2(db_, "PRAGMA quick_check", -1, &st, nullptr) == SQLITE_OK) {
      const int rc = sqlite3_step(st);
      verdict = rc == SQLITE_ROW ? text_col(st, 0) : sqlite3_errmsg(db_);
    } else {
      verdict = sqlite3_errmsg(db_);
    }
    if (st) sqlite3_finalize(st);
    if (verdict != "ok") {
      sqlite3_close(db_);
      db_ = nullptr;
      ::close(lock_fd_);
      fail("--store {}: the job database {} is damaged ({}); {}", dir, db, verdict.substr(0, 300), advice);
    }
  }
  exec("PRAGMA journal_mode=WAL");
  exec("PRAGMA synchronous=NORMAL");
  exec(
      "CREATE TABLE IF NOT EXISTS jobs ("
      " seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, status TEXT NOT NULL,"
      " request TEXT NOT NULL, resolved TEXT NOT NULL, phase TEXT NOT NULL DEFAULT '',"
      " progress REAL NOT NULL DEFAULT 0, eta_s REAL NOT NULL DEFAULT -1, step INTEGER NOT NULL DEFAULT 0,"
      " steps INTEGER NOT NULL DEFAULT 0, error TEXT NOT NULL DEFAULT '', error_code TEXT NOT NULL DEFAULT "
      "'',"
      " attempts INTEGER NOT NULL DEFAULT 0, cancel_requested INTEGER NOT NULL DEFAULT 0,"
      " created_at REAL NOT NULL, started_at REAL NOT NULL DEFAULT 0, finished_at REAL NOT NULL DEFAULT 0,"
      " output_bytes INTEGER NOT NULL DEFAULT 0, result TEXT NOT NULL DEFAULT '{}')");
  // Columns added after the first release: a store made before them gets them (old rows: priority 0, one video).
  std::vector<std::string> have;
  {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, "PRAGMA table_info(jobs)", -1, &st, nullptr) == SQLITE_OK)
      while (sqlite3_step(st) == SQLITE_ROW) have.push_back(text_col(st, 1));
    if (st) sqlite3_finalize(st);
  }
  const std::pair<const char*, const char*> added[] = {
      {"priority", "ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0"},
      {"videos", "ALTER TABLE jobs ADD COLUMN videos TEXT NOT NULL DEFAULT '[]'"},
      {"preemptions", "ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0"}};
  for (const auto& [column, sql] : added)
    if (std::find(have.begin(), have.end(), column) == have.end()) exec(sql);
  exec("CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, seq)");
  exec("CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(status, priority DESC, seq)");
  exec("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)");
}

JobStore::~JobStore() {
  if (db_) sqlite3_close(db_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

namespace {

// The files of job `id` in outputs/: every name starting with the id (ids have one length, so no id is another's
// prefix), those ending in one of `suffixes` when given.
std::vector<fs::path> job_files(const std::string& dir, const std::string& id,
                                std::initializer_list<const char*> suffixes = {}) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "outputs", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(id, 0) != 0) continue;
    bool match = suffixes.size() == 0;
    for (const char* s : suffixes) match |= name.ends_with(s);
    if (match) out.push_back(e.path());
  }
  return out;
}

}  // namespace

int JobStore::remove_partials(const std::string& id) {
  H3_ASSERT(valid_job_id(id), "remove_partials for a malformed id '{}'", id);
  std::error_code ec;
  int n = 0;
  for (const fs::path& p : job_files(dir_, id, {".partial", ".mp4.tmp"})) n += fs::remove(p, ec) ? 1 : 0;
  return n;
}

int JobStore::sweep_partials() {
  std::error_code ec;
  int n = 0;
  for (const auto& e : fs::directory_iterator(fs::path(dir_) / "outputs", ec)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".partial") || name.ends_with(".mp4.tmp")) n += fs::remove(e.path(), ec) ? 1 : 0;
  }
  return n;
}

std::string JobStore::output_path(const std::string& id, int index) const {
  H3_ASSERT(valid_job_id(id), "output path for a malformed id '{}'", id);
  H3_ASSERT(index >= 0 && index < kMaxVideos, "output path for video {} of {}", index, id);
  return (fs::path(dir_) / "outputs" / (index == 0 ? id + ".mp4" : fmt::format("{}-{}.mp4", id, index))).string();
}

std::string JobStore::preview_path(const std::string& id) const {
  H3_ASSERT(valid_job_id(id), "preview path for a malformed id '{}'", id);
  return (fs::path(dir_) / "outputs" / (id + ".preview.png")).string();
}

void JobStore::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    fail("job store {}: '{}' failed: {}", dir_, sql, msg);
  }
}

namespace {
struct Stmt {
  sqlite3_stmt* st = nullptr;
  ~Stmt() {
    if (st) sqlite3_finalize(st);
  }
};
}  // namespace

std::vector<JobRecord> JobStore::query(const std::string& sql, const std::vector<Arg>& args) {
  Stmt s;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s.st, nullptr) != SQLITE_OK)
    fail("job store: cannot prepare '{}': {}", sql, sqlite3_errmsg(db_));
  for (size_t i = 0; i < args.size(); ++i) {
    const int k = static_cast<int>(i) + 1;
    if (auto* v = std::get_if<int64_t>(&args[i]))
      sqlite3_bind_int64(s.st, k, *v);
    else if (auto* d = std::get_if<double>(&args[i]))
      sqlite3_bind_double(s.st, k, *d);
    else {
      const auto& t = std::get<std::string>(args[i]);
      sqlite3_bind_text(s.st, k, t.data(), static_cast<int>(t.size()), SQLITE_TRANSIENT);
    }
  }
  std::vector<JobRecord> out;
  for (;;) {
    int rc = sqlite3_step(s.st);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) fail("job store: '{}' failed: {}", sql, sqlite3_errmsg(db_));
    if (sqlite3_column_count(s.st) < kColumnCount) continue;
    JobRecord r;
    std::string damaged;
    r.seq = sqlite3_column_int64(s.st, 0);
    r.id = text_col(s.st, 1);
    r.status = text_col(s.st, 2);
    r.request = json_col(s.st, 3, "request", damaged);
    r.resolved = json_col(s.st, 4, "resolved", damaged);
    r.phase = text_col(s.st, 5);
    r.progress = sqlite3_column_double(s.st, 6);
    r.eta_s = sqlite3_column_double(s.st, 7);
    r.step = sqlite3_column_int(s.st, 8);
    r.steps = sqlite3_column_int(s.st, 9);
    r.error = text_col(s.st, 10);
    r.error_code = text_col(s.st, 11);
    r.attempts = sqlite3_column_int(s.st, 12);
    r.cancel_requested = sqlite3_column_int(s.st, 13) != 0;
    r.created_at = sqlite3_column_double(s.st, 14);
    r.started_at = sqlite3_column_double(s.st, 15);
    r.finished_at = sqlite3_column_double(s.st, 16);
    r.output_bytes = sqlite3_column_int64(s.st, 17);
    r.result = json_col(s.st, 18, "result", damaged);
    r.priority = sqlite3_column_int(s.st, 19);
    r.videos = json_col(s.st, 20, "videos", damaged);
    if (!r.videos.is_array()) r.videos = nlohmann::json::array();
    r.preemptions = sqlite3_column_int(s.st, 21);
    r.damaged = damaged;
    out.push_back(std::move(r));
  }
  return out;
}

int JobStore::changes(const std::string& sql, const std::vector<Arg>& args) {
  query(sql, args);
  return sqlite3_changes(db_);
}

std::optional<JobRecord> JobStore::insert(const nlohmann::json& request, const nlohmann::json& resolved,
                                          int64_t max_queued, int priority, const nlohmann::json& videos) {
  std::lock_guard lock(mu_);
  Stmt s;
  sqlite3_prepare_v2(db_, "SELECT COUNT(*) FROM jobs WHERE status = 'queued'", -1, &s.st, nullptr);
  int64_t queued = sqlite3_step(s.st) == SQLITE_ROW ? sqlite3_column_int64(s.st, 0) : 0;
  if (queued >= max_queued) return std::nullopt;
  const std::string id = new_job_id();
  query(
      "INSERT INTO jobs (id, status, request, resolved, created_at, priority, videos) VALUES (?, 'queued', ?, ?, ?, ?, "
      "?)",
      {id, dump_json(request), dump_json(resolved), unix_now(), int64_t{priority}, dump_json(videos)});
  auto r = query(std::string("SELECT ") + kColumns + " FROM jobs WHERE id = ?", {id});
  H3_ASSERT(r.size() == 1, "inserted job {} not found", id);
  return r[0];
}

std::optional<JobRecord> JobStore::get(const std::string& id) {
  std::lock_guard lock(mu_);
  auto r = query(std::string("SELECT ") + kColumns + " FROM jobs WHERE id = ?", {id});
  if (r.empty()) return std::nullopt;
  return r[0];
}

std::vector<JobRecord> JobStore::list(int64_t limit, std::optional<int64_t> after_seq, bool descending,
                                      const std::string& status) {
  std::lock_guard lock(mu_);
  std::string sql = std::string("SELECT ") + kColumns + " FROM jobs WHERE 1=1";
  std::vector<Arg> args;
  if (after_seq) {
    sql += descending ? " AND seq < ?" : " AND seq > ?";
    args.emplace_back(*after_seq);
  }
  if (!status.empty()) {
    sql += " AND status = ?";
    args.emplace_back(status);
  }
  sql += descending ? " ORDER BY seq DESC LIMIT ?" : " ORDER BY seq ASC LIMIT ?";
  args.emplace_back(limit);
  return query(sql, args);
}

std::optional<JobRecord> JobStore::next_queued() {
  std::lock_guard lock(mu_);
  auto r =
      query(std::string("SELECT ") + kColumns + " FROM jobs WHERE status = 'queued'" + kQueueOrder + " LIMIT 1", {});
  if (r.empty()) return std::nullopt;
  return r[0];
}

std::optional<int> JobStore::top_queued_priority() {
  std::lock_guard lock(mu_);
  Stmt s;
  sqlite3_prepare_v2(db_, "SELECT MAX(priority) FROM jobs WHERE status = 'queued'", -1, &s.st, nullptr);
  if (sqlite3_step(s.st) != SQLITE_ROW || sqlite3_column_type(s.st, 0) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_int(s.st, 0);
}

int64_t JobStore::count_suspended() {
  std::lock_guard lock(mu_);
  Stmt s;
  sqlite3_prepare_v2(db_, "SELECT COUNT(*) FROM jobs WHERE status = 'queued' AND phase != ''", -1, &s.st, nullptr);
  return sqlite3_step(s.st) == SQLITE_ROW ? sqlite3_column_int64(s.st, 0) : 0;
}

std::vector<JobRecord> JobStore::queued_ahead(const JobRecord& r) {
  std::lock_guard lock(mu_);
  return query(std::string("SELECT ") + kColumns +
                   " FROM jobs WHERE status = 'queued' AND id != ? AND (priority > ? OR (priority = ? AND seq < ?))" +
                   kQueueOrder,
               {r.id, int64_t{r.priority}, int64_t{r.priority}, r.seq});
}

int64_t JobStore::count(const std::string& status) {
  std::lock_guard lock(mu_);
  Stmt s;
  sqlite3_prepare_v2(db_, "SELECT COUNT(*) FROM jobs WHERE status = ?", -1, &s.st, nullptr);
  sqlite3_bind_text(s.st, 1, status.c_str(), -1, SQLITE_TRANSIENT);
  return sqlite3_step(s.st) == SQLITE_ROW ? sqlite3_column_int64(s.st, 0) : 0;
}

int64_t JobStore::queue_position(const JobRecord& r) {
  std::lock_guard lock(mu_);
  Stmt s;
  sqlite3_prepare_v2(db_,
                     "SELECT COUNT(*) FROM jobs WHERE status = 'queued' AND id != ? AND (priority > ? OR (priority = ? "
                     "AND seq < ?))",
                     -1, &s.st, nullptr);
  sqlite3_bind_text(s.st, 1, r.id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(s.st, 2, r.priority);
  sqlite3_bind_int64(s.st, 3, r.priority);
  sqlite3_bind_int64(s.st, 4, r.seq);
  return 1 + (sqlite3_step(s.st) == SQLITE_ROW ? sqlite3_column_int64(s.st, 0) : 0);
}

bool JobStore::mark_running(const std::string& id) {
  std::lock_guard lock(mu_);
  // A job suspended for one of higher priority (its phase kept) resumes: no new attempt, its progress kept.
  return changes(
             "UPDATE jobs SET status = 'in_progress', started_at = ?, eta_s = -1,"
             " attempts = attempts + (CASE WHEN phase = '' THEN 1 ELSE 0 END),"
             " progress = CASE WHEN phase = '' THEN 0 ELSE progress END,"
             " step = CASE WHEN phase = '' THEN 0 ELSE step END, steps = CASE WHEN phase = '' THEN 0 ELSE steps END,"
             " phase = CASE WHEN phase = '' THEN 'start' ELSE phase END WHERE id = ? AND status = 'queued'",
             {unix_now(), id}) == 1;
}

bool JobStore::update_running(const std::string& id, const std::string& set, std::vector<Arg> args) {
  std::lock_guard lock(mu_);
  args.emplace_back(id);
  return changes("UPDATE jobs SET " + set + " WHERE id = ? AND status = 'in_progress'", args) == 1;
}

bool JobStore::update_progress(const std::string& id, const std::string& phase, int step, int steps, double progress,
                               double eta_s) {
  return update_running(id, "phase = ?, step = ?, steps = ?, progress = ?, eta_s = ?",
                        {phase, int64_t{step}, int64_t{steps}, progress, eta_s});
}

bool JobStore::request_cancel(const std::string& id) {
  return update_running(id, "cancel_requested = 1", {});
}

bool JobStore::cancel_queued(const std::string& id) {
  std::lock_guard lock(mu_);
  return changes(
             "UPDATE jobs SET status = 'cancelled', cancel_requested = 1, finished_at = ?, error_code = "
             "'cancelled',"
             " error = 'cancelled while queued' WHERE id = ? AND status = 'queued'",
             {unix_now(), id}) == 1;
}

bool JobStore::finish(const std::string& id, const std::string& status, const std::string& error_code,
                      const std::string& error, int64_t output_bytes, const nlohmann::json& result) {
  const bool done = status == kCompleted;
  return update_running(id,
                        "status = ?, error_code = ?, error = ?, output_bytes = ?, result = ?, finished_at = ?,"
                        " progress = CASE WHEN ? THEN 100 ELSE progress END, eta_s = CASE WHEN ? THEN 0 ELSE -1 END,"
                        " phase = CASE WHEN ? THEN 'done' ELSE phase END",
                        {status, error_code, error, output_bytes, dump_json(result), unix_now(), int64_t{done},
                         int64_t{done}, int64_t{done}});
}

bool JobStore::requeue(const std::string& id) {
  return update_running(id, "status = 'queued', phase = '', progress = 0, eta_s = -1, step = 0, steps = 0", {});
}

std::shared_mutex& JobStore::files_mu(const std::string& id) {
  return files_mu_[std::hash<std::string>{}(id) % files_mu_.size()];
}

std::shared_lock<std::shared_mutex> JobStore::hold_files(const std::string& id) {
  return std::shared_lock(files_mu(id));
}

bool JobStore::remove(const std::string& id) {
  std::unique_lock files(files_mu(id));
  std::lock_guard lock(mu_);
  if (changes("DELETE FROM jobs WHERE id = ? AND status != 'in_progress'", {id}) != 1) return false;
  // Every file of the job: its videos, their latents and the pictures made from them (serve/previews.h), the latest
  // preview, anything unfinished.
  std::error_code ec;
  for (const fs::path& p : job_files(dir_, id)) fs::remove(p, ec);
  return true;
}

bool JobStore::suspend(const std::string& id) {
  return update_running(id, "status = 'queued', eta_s = -1, preemptions = preemptions + 1", {});
}

bool JobStore::update_videos(const std::string& id, const nlohmann::json& videos) {
  return update_running(id, "videos = ?", {dump_json(videos)});
}

std::vector<std::string> JobStore::recover(int max_attempts) {
  std::lock_guard lock(mu_);
  std::vector<std::string> ids;
  // Jobs suspended for others lost their state with the old rank group: they start afresh.
  changes("UPDATE jobs SET phase = '', progress = 0, eta_s = -1, step = 0, steps = 0 WHERE status = 'queued'", {});
  for (auto& r : query(std::string("SELECT ") + kColumns + " FROM jobs WHERE status = 'in_progress'", {})) {
    ids.push_back(r.id);
    remove_partials(r.id);
    if (r.cancel_requested) {
      changes(
          "UPDATE jobs SET status = 'cancelled', finished_at = ?, error_code = 'cancelled', error = ? WHERE "
          "id = ?",
          {unix_now(), std::string("cancelled; the server restarted before the job stopped"), r.id});
    } else if (r.attempts < max_attempts) {
      changes(
          "UPDATE jobs SET status = 'queued', phase = '', progress = 0, eta_s = -1, step = 0, steps = 0 "
          "WHERE id = ?",
          {r.id});
    } else {
      changes(
          "UPDATE jobs SET status = 'failed', finished_at = ?, error_code = 'server_restart', error = ? "
          "WHERE id = ?",
          {unix_now(),
           fmt::format("the server stopped while this job was running, {} time(s); not retried again "
                       "(--max-attempts {})",
                       r.attempts, max_attempts),
           r.id});
    }
  }
  return ids;
}

void JobStore::put_meta(const std::string& key, const std::string& value) {
  std::lock_guard lock(mu_);
  query("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        {key, value});
}

std::optional<std::string> JobStore::get_meta(const std::string& key) {
  std::lock_guard lock(mu_);
  Stmt s;
  sqlite3_prepare_v2(db_, "SELECT value FROM meta WHERE key = ?", -1, &s.st, nullptr);
  sqlite3_bind_text(s.st, 1, key.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(s.st) != SQLITE_ROW) return std::nullopt;
  return text_col(s.st, 0);
}

}  // namespace h3::serve
