// Rank 0's side of the control channel in the rank group (serve/worker.h): a reader thread takes the supervisor's
// messages into an inbox; the commands (job, forget, shutdown) wait there for the worker's loop, which broadcasts them
// to every rank, and "cancel" / "suspend" become the running job's flags, which the runner turns into the agreed
// control word at its next step. A cancel or suspend for a job still waiting in the inbox applies when that job starts,
// once: a job suspended before its first step and started again later does not find the suspend again.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace h3::serve {

class LineChannel;

struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<nlohmann::json> commands;  // job / forget / shutdown
  std::string running;                  // id of the job in progress ("" when idle)
  std::atomic<bool> cancel{false}, suspend{false};
  std::string pending_cancel, pending_suspend;

  // Reads the channel until it ends (then queues a shutdown).
  void reader(LineChannel& ch);
  // One message from the supervisor.
  void take(nlohmann::json m);
  // The next command, waiting up to `wait_s` (a "tick" when none came); a job becomes the running one.
  nlohmann::json next(double wait_s);
  // The running job has ended.
  void finished();
};

}  // namespace h3::serve
