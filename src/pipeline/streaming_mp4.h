// The MP4 of one request written while it is decoded: the video VAE hands over finished frames chunk by chunk and a
// worker thread feeds them to libx264 while the GPU decodes the next chunk (and the soundtrack); finish() adds the
// audio and the trailer. What reaches the file is what Mp4Writer would write from the whole clip at once.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "core/tensor.h"
#include "media/mp4_writer.h"

namespace h3 {

class StreamingMp4 {
 public:
  StreamingMp4(const std::string& path, const MediaSpec& spec);
  ~StreamingMp4();  // unfinished: the worker stops and the partial file is removed (Mp4Writer's atomicity)
  StreamingMp4(const StreamingMp4&) = delete;
  StreamingMp4& operator=(const StreamingMp4&) = delete;

  // Pixels [3, n, H, W] in [0, 1], the next n frames in order; queued (the worker encodes them).
  void add_frames(Tensor pixels01);
  // Waits for every queued frame, adds the soundtrack [channels, 1 or N...] and finishes the file. Rethrows an error
  // the worker met.
  void finish(const Tensor& wave);

 private:
  void work();
  Mp4Writer writer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Tensor> queue_;
  bool closing_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace h3
