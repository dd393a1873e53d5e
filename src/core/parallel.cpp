#include "core/parallel.h"

#include "core/knobs.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace h3 {

int cpu_threads() {
  static int n =
      knobs().threads > 0 ? knobs().threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return n;
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (n <= 0) return;
  int64_t workers = std::min<int64_t>(cpu_threads(), (n + min_chunk - 1) / std::max<int64_t>(min_chunk, 1));
  if (workers <= 1) {
    fn(0, n);
    return;
  }
  std::vector<std::thread> threads;
  std::exception_ptr error;
  std::mutex error_mutex;
  int64_t per = n / workers, rem = n % workers;
  int64_t begin = 0;
  for (int64_t w = 0; w < workers; ++w) {
    int64_t end = begin + per + (w < rem ? 1 : 0);
    auto body = [&, begin, end] {
      try {
        fn(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    };
    if (w + 1 == workers)
      body();
    else
      threads.emplace_back(body);
    begin = end;
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace h3
