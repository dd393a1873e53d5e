// Ctrl-C and SIGTERM as something a command can poll or wait on. A signal handler may touch only static storage, so
// the process's one copy of that state lives here and the commands (tools/) hold none. One of each at a time.
#pragma once
#include <atomic>

namespace h3 {

// While alive, the first SIGINT sets flag() and writes `notice` to stderr (a long job stops cleanly at its next
// check); a second one ends the process at once, as SIGINT does by default (a long phase may not reach its next
// check soon). SIGINT's default action again when destroyed.
class SigintCancels {
 public:
  explicit SigintCancels(const char* notice);
  ~SigintCancels();
  SigintCancels(const SigintCancels&) = delete;
  SigintCancels& operator=(const SigintCancels&) = delete;
  const std::atomic<bool>* flag() const;
};

// SIGINT and SIGTERM for a server that stops from a normal thread: catch() routes them to wait(), which returns
// true when one arrived and false when release() was called (the server stopped by itself).
class StopSignals {
 public:
  StopSignals();   // throws h3::Error when the pipe cannot be made
  ~StopSignals();  // the default actions again
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  void catch_signals();
  bool wait();
  void release();
};

// The failure tests' injected fault (H3_DEBUG_FAULT, the fake runner's debug fault): SIGKILL this process, or
// stall it for ever as a hung rank would.
[[noreturn]] void kill_or_stall(bool kill);

}  // namespace h3
