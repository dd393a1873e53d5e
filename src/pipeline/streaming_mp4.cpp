#include "pipeline/streaming_mp4.h"

namespace h3 {

StreamingMp4::StreamingMp4(const std::string& path, const MediaSpec& spec) : writer_(path, spec) {
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
      writer_.add_frames(frames);
    } catch (...) {
      std::lock_guard lock(mu_);
      error_ = std::current_exception();
      queue_.clear();
      return;
    }
  }
}

void StreamingMp4::add_frames(Tensor pixels01) {
  {
    std::lock_guard lock(mu_);
    if (error_) std::rethrow_exception(error_);
    queue_.push_back(std::move(pixels01));
  }
  cv_.notify_all();
}

void StreamingMp4::finish(const Tensor& wave) {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  worker_.join();
  if (error_) std::rethrow_exception(error_);
  writer_.add_audio(wave);
  writer_.finish();
}

}  // namespace h3
