// "At work" while a job runs: rank 0 tells the supervisor so between progress messages when its process has
// computed meanwhile. One DiT call on a CPU can outlast the stall timeout (a 1280x720 step took longer than 270 s)
// and the stall timeout must mean silence, not a long call. A process that waits without computing (blocked,
// stopped, deadlocked) says nothing, so the stall timeout still finds it; a rank that dies is found sooner by its
// peers' collective timeout (--timeout) and by mpirun.
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace h3::serve {

class AtWork {
 public:
  // Every `every_s` seconds, calls `say` when the process used at least `min_cpu` x `every_s` seconds of CPU
  // time (all its threads) since the last look. The default tells computing from waiting, not fast from slow: a
  // rank stalled at a block used 0.01 s of CPU in 20 s (its threads blocked), while a computing rank of a niced
  // server on 2 shared cores got less than the quarter of a core once asked for (a 1280x720 job was taken for a
  // stalled one after 270 s inside its DiT call); 0.5 % of a core is 100 x the first and under the second.
  AtWork(std::function<void()> say, double every_s, double min_cpu = 0.005);
  ~AtWork();  // stops and joins the thread
  AtWork(const AtWork&) = delete;
  AtWork& operator=(const AtWork&) = delete;

 private:
  void loop(double every_s, double min_cpu);
  std::function<void()> say_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// CPU seconds the process has used, all threads together.
double process_cpu_seconds();

}  // namespace h3::serve
