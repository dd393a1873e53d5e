// Rank 0's inbox of the supervisor's messages (serve/inbox.h).
#include "serve/inbox.h"

#include <chrono>

#include "serve/channel.h"

namespace h3::serve {

void Inbox::reader(LineChannel& ch) {
  for (;;) {
    auto m = ch.receive(-1);
    if (!m) break;
    take(std::move(*m));
  }
  std::lock_guard lock(mu);
  commands.push_back({{"type", "shutdown"}, {"why", "the supervisor closed the control channel"}});
  cv.notify_all();
}

void Inbox::take(nlohmann::json m) {
  const std::string type = m.value("type", "");
  std::lock_guard lock(mu);
  if (type == "cancel" || type == "suspend") {
    const std::string id = m.value("id", "");
    // A job still waiting in the inbox starts cancelled / suspended (it must still run, so "done" is reported).
    std::atomic<bool>& flag = type == "cancel" ? cancel : suspend;
    if (!id.empty() && id == running)
      flag = true;
    else
      (type == "cancel" ? pending_cancel : pending_suspend) = id;
  } else if (type == "job" || type == "shutdown" || type == "forget") {
    commands.push_back(std::move(m));
    cv.notify_all();
  }
}

nlohmann::json Inbox::next(double wait_s) {
  std::unique_lock lock(mu);
  cv.wait_for(lock, std::chrono::duration<double>(wait_s), [&] { return !commands.empty(); });
  if (commands.empty()) return {{"type", "tick"}};
  nlohmann::json c = std::move(commands.front());
  commands.pop_front();
  if (c.value("type", "") == "job") {
    running = c.value("id", "");
    cancel = !running.empty() && running == pending_cancel;
    suspend = !running.empty() && running == pending_suspend;
    // For this start of the job only.
    if (cancel) pending_cancel.clear();
    if (suspend) pending_suspend.clear();
  }
  return c;
}

void Inbox::finished() {
  std::lock_guard lock(mu);
  running.clear();
  cancel = false;
  suspend = false;
}

}  // namespace h3::serve
