// The supervisor of `h3 serve`: owns the job store, the event hub and the rank group. One thread (the group
// thread) starts the group (`mpirun -np N h3 serve-worker ...`, or the worker directly for one rank), waits
// for rank 0 to connect and report its models loaded, hands it one job at a time (the highest priority first, FIFO
// within a priority; a job of higher priority suspends the running one at its next step boundary), relays progress and
// previews, and watches it: when the group exits (a rank crashed, or a rank's collective timed out and
// aborted the job) or stops talking for longer than the stall timeout while running a job, the running job
// fails with the reason read from the group's log (which names the rank), the group is recreated, and the
// queue continues.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/preview.h"
#include "serve/events.h"
#include "serve/http_policy.h"
#include "serve/runner.h"
#include "serve/store.h"

namespace h3::serve {

class LineChannel;

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8190;
  std::string store_dir;
  std::string api_key;  // empty: no authentication
  int ranks = 1;
  double rank_timeout_s = 120;               // the ranks' collective timeout (h3 --timeout)
  double stall_timeout_s = 0;                // no word from rank 0 while running a job; 0 = 2 x rank timeout + 30 s
  double startup_timeout_s = 1800;           // to connect and load the models
  int64_t max_queue = 64;                    // queued jobs; more -> 429
  HttpLimits http;                           // the HTTP front's limits (serve/http_policy.h)
  std::vector<std::string> allowed_hosts;    // Host names served besides IP literals and localhost ("*": any)
  int max_attempts = 2;                      // a job interrupted by server restarts runs at most this often
  bool debug_faults = false;                 // accept the "x_debug_fault" request field (tests only)
  int preview_every = kDefaultPreviewEvery;  // previews every K DiT calls (0 = none; pipeline/preview.h)
  int64_t event_log = 4096;                  // events kept in memory for streams (serve/events.h)
  std::string lora_dir;                      // LoRA files a job may name ("loras": [{"name", "strength"}]); "" = none
  std::string model_id = "minimax-h3";
  std::string device = "cpu";  // where the group runs (h3 --device): the web page's defaults follow it
  std::string log_level = "info";
  std::string self_exe;  // this binary (for the worker command)
  std::string mpirun = "mpirun";
  RunnerOptions runner;
};

// An error answered to the client: HTTP status, a short code and a message.
struct ApiError {
  int status;
  std::string code, message;
};

class Supervisor {
 public:
  explicit Supervisor(ServeOptions options);
  ~Supervisor();
  void start();
  // Stops the group (a running job goes back to the queue) and wakes every event stream.
  void stop();

  const ServeOptions& options() const { return o_; }
  JobStore& store() { return *store_; }
  EventHub& events() { return events_; }

  // API operations; each throws ApiError.
  JobRecord submit(const nlohmann::json& request);
  JobRecord cancel(const std::string& id);
  void remove(const std::string& id);
  JobRecord get(const std::string& id);
  std::vector<JobRecord> list(int64_t limit, std::optional<int64_t> after_seq, bool descending,
                              const std::string& status);

  nlohmann::json job_json(const JobRecord& r);
  nlohmann::json health();
  nlohmann::json models();
  std::string metrics();
  bool ready();

  // Text shown to clients, with the server's file paths replaced by symbolic names (<store>, <lora-dir>,
  // <model>) or, for any other absolute path, by its last component.
  std::string scrub(std::string text) const;
  nlohmann::json client_parameters(const nlohmann::json& resolved) const;

  // Counters the HTTP layer feeds.
  std::atomic<int64_t> http_requests{0}, http_4xx{0}, http_5xx{0}, sse_streams{0};

 private:
  enum class State { starting, loading, ready, busy, restarting, stopped };
  static const char* state_name(State s);
  static double steady_now();
  // The group thread (serve/supervisor_group.cpp).
  struct GroupCommand {
    std::vector<std::string> args, env;  // argv and environment of the group's command
  };
  void group_loop();
  bool launch_group();
  GroupCommand group_command(const std::string& sock, const std::string& token) const;
  pid_t spawn_group(GroupCommand& cmd);
  bool await_rank0(int listen_fd, const std::string& token);
  void run_group();
  bool drain_messages(bool& loaded, std::string& death);
  void on_ready(const nlohmann::json& m);
  void shutdown_group();
  void kill_group(const std::string& why);
  std::string reap_reason();
  void set_state(State s, const std::string& error = "");
  void publish_job(const std::string& id);
  void dispatch_next();
  // Asks the running job to stop at its next step boundary when a queued job has a higher priority (serve/
  // supervisor.cpp says why a suspend and not a queue order only).
  void maybe_preempt();
  void on_message(const nlohmann::json& m);
  void on_job_end(const std::string& id, const nlohmann::json& m);
  void on_video_done(const std::string& id, const nlohmann::json& m);
  void on_preview(const std::string& id, const nlohmann::json& m);
  // Seconds a job still needs (all its videos not yet made), scaled from the last measured job; nullopt before one.
  std::optional<double> estimate_remaining_s(const JobRecord& r);
  void record_timing(const JobRecord& job, const nlohmann::json& result);
  void fail_running(const std::string& code, const std::string& message);
  // Records a job's end; a store failure keeps it in pending_ (retried by retry_pending, shown meanwhile).
  void finish_job(const std::string& id, const std::string& status, const std::string& code, const std::string& message,
                  int64_t bytes, const nlohmann::json& result);
  void retry_pending();
  // Overlays a job end held in pending_ on a stored record (get() and list() show the same); mu_ held.
  void show_pending(JobRecord& r) const;
  void post(nlohmann::json message);
  void wake();

  ServeOptions o_;
  std::unique_ptr<JobStore> store_;
  EventHub events_{static_cast<size_t>(o_.event_log)};
  std::thread group_thread_;
  std::atomic<bool> stopping_{false};
  int wake_pipe_[2] = {-1, -1};

  std::mutex mu_;  // guards everything below
  State state_ = State::starting;
  std::string last_error_;
  nlohmann::json limits_;  // from the group (persisted in the store's meta table)
  nlohmann::json models_ = nlohmann::json::array();
  std::string notice_;       // why the videos mean nothing ("" for real weights)
  nlohmann::json measured_;  // the timing of the last completed job (for estimates), or null
  std::deque<nlohmann::json> outbox_;
  std::string running_;  // job id the group is running
  int running_priority_ = 0;
  bool suspend_asked_ = false;  // the running job was asked to stop for one of higher priority
  int generation_ = 0;
  int restarts_ = 0;
  double ready_since_ = 0;
  double last_load_s_ = 0;
  std::atomic<int64_t> jobs_submitted_{0}, jobs_completed_{0}, jobs_failed_{0}, jobs_cancelled_{0};
  double job_seconds_sum_ = 0;
  struct PendingFinish {
    std::string status, code, message;
    int64_t bytes = 0;
    nlohmann::json result;
  };
  std::map<std::string, PendingFinish> pending_;  // job ends the store could not record yet
  double last_store_error_ = 0;

  // Group-thread state.
  std::unique_ptr<LineChannel> channel_;
  pid_t child_ = -1;
  int child_status_ = 0;
  std::string run_dir_, log_path_;
  double last_word_ = 0;
};

}  // namespace h3::serve
