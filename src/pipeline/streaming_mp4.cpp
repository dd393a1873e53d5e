#include "pipeline/streaming_mp4.h"

#include <chrono>

#include "core/error.h"

namespace h3 {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

StreamingMp4::StreamingMp4(const std::string& path, const MediaSpec& spec, Prepare prepare)
    : writer_(path, spec), prepare_(std::move(prepare)) {
  worker_ = std::thread([this] { work(); });
}

StreamingMp4::~StreamingMp4() {
  {
    std::lock_guard lock(mu_);
    abandoned_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void StreamingMp4::work() {
  try {
    for (;;) {
      Tensor frames;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return ended_ || abandoned_ || !queue_.empty(); });
        if (abandoned_) return;
        if (queue_.empty()) break;  // ended, every frame encoded
        frames = std::move(queue_.front());
        queue_.pop_front();
      }
      auto t0 = std::chrono::steady_clock::now();
      if (prepare_) frames = prepare_(frames);
      times_.prepare += seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      writer_.add_frames(frames);
      times_.encode += seconds_since(t0);
    }
    writer_.finish_video();
  } catch (...) {
    std::lock_guard lock(mu_);
    error_ = std::current_exception();
    queue_.clear();
  }
}

void StreamingMp4::add_frames(Tensor frames) {
  {
    std::lock_guard lock(mu_);
    if (error_) std::rethrow_exception(error_);
    H3_CHECK(!ended_, "mp4 {}: frames added after end_video()", writer_.path());
    queue_.push_back(std::move(frames));
  }
  cv_.notify_all();
}

void StreamingMp4::end_video() {
  {
    std::lock_guard lock(mu_);
    ended_ = true;
  }
  cv_.notify_all();
}

void StreamingMp4::finish(const Tensor& wave) {
  end_video();
  auto t0 = std::chrono::steady_clock::now();
  try {
    writer_.add_audio(wave);
  } catch (...) {
    // The worker's error first (it made the writer unusable, the audio's refusal only follows from it).
    worker_.join();
    if (error_) std::rethrow_exception(error_);
    throw;
  }
  times_.audio = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  worker_.join();
  times_.finish_wait = seconds_since(t0);
  if (error_) std::rethrow_exception(error_);
  t0 = std::chrono::steady_clock::now();
  writer_.finish();
  times_.finish_tail = seconds_since(t0);
  times_.writer = writer_.finish_times();
}

}  // namespace h3
