#include "pipeline/streaming_mp4.h"

#include <chrono>

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
    closing_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void StreamingMp4::work() {
  for (;;) {
    Tensor frames;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closing with nothing left
      frames = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      auto t0 = std::chrono::steady_clock::now();
      if (prepare_) frames = prepare_(frames);
      times_.prepare += seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      writer_.add_frames(frames);
      times_.encode += seconds_since(t0);
    } catch (...) {
      std::lock_guard lock(mu_);
      error_ = std::current_exception();
      queue_.clear();
      return;
    }
  }
}

void StreamingMp4::add_frames(Tensor frames) {
  {
    std::lock_guard lock(mu_);
    if (error_) std::rethrow_exception(error_);
    queue_.push_back(std::move(frames));
  }
  cv_.notify_all();
}

void StreamingMp4::finish(const Tensor& wave) {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  auto t0 = std::chrono::steady_clock::now();
  worker_.join();
  times_.finish_wait = seconds_since(t0);
  if (error_) std::rethrow_exception(error_);
  t0 = std::chrono::steady_clock::now();
  writer_.add_audio(wave);
  times_.audio = seconds_since(t0);
  writer_.finish();
  times_.finish_tail = seconds_since(t0);
  times_.writer = writer_.finish_times();
}

}  // namespace h3
