// `h3 serve-worker`: one rank of the server's rank group. Every rank loads the models once (JobRunner) and
// then loops on commands broadcast by rank 0: a tick (about once a second while idle, so the others' receive
// never reaches the collective timeout and a dead rank 0 is noticed), a job, or shutdown. Rank 0 alone talks
// to the supervisor over the control channel (serve/channel.h): a reader thread turns "cancel" into the job's
// cancel flag, which the runner turns into an agreed control word at the next step, so all ranks stop
// together and loop again.
#pragma once
#include <string>

#include "serve/runner.h"

namespace h3::serve {

struct WorkerOptions {
  std::string control;  // the supervisor's control socket
  std::string token;    // proves to the supervisor that this process is the group it started
  RunnerOptions runner;
  double tick_s = 1.0;
};

// Runs until shutdown or until the supervisor goes away; returns the process exit status.
int run_worker(const WorkerOptions& options);

}  // namespace h3::serve
