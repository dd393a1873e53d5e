// The MP4 of one request written while it is decoded: the video VAE hands over finished frames chunk by chunk and a
// worker thread prepares them (`prepare`, e.g. the decoder's output to pixels in [0, 1]) and feeds them to libx264
// while the GPU decodes the next chunk (and the soundtrack); finish() adds the audio and the trailer. What reaches
// the file is what Mp4Writer would write from the whole clip at once. Nothing of the frames' host work stays on the
// thread that drives the GPU: at 480p it was a third of the time between the last denoise step and the file.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/tensor.h"
#include "media/mp4_writer.h"

namespace h3 {

class StreamingMp4 {
 public:
  using Prepare = std::function<Tensor(const Tensor&)>;
  StreamingMp4(const std::string& path, const MediaSpec& spec, Prepare prepare = {});
  ~StreamingMp4();  // unfinished: the worker stops and the partial file is removed (Mp4Writer's atomicity)
  StreamingMp4(const StreamingMp4&) = delete;
  StreamingMp4& operator=(const StreamingMp4&) = delete;

  // The next n frames in order: pixels [3, n, H, W] in [0, 1] once prepared; queued (the worker encodes them).
  void add_frames(Tensor frames);
  // Waits for every queued frame, adds the soundtrack [channels, 1 or N...] and finishes the file. Rethrows an error
  // the worker met.
  void finish(const Tensor& wave);

  // Where the writer's time went: on the worker, preparing and encoding frames; on the caller, finish()'s wait for
  // the worker's last frames and its audio and trailer.
  struct Times {
    double prepare = 0, encode = 0, finish_wait = 0, finish_tail = 0;
    double audio = 0;               // the soundtrack's encode (Mp4Writer::add_audio)
    Mp4Writer::FinishTimes writer;  // finish_tail's split
  };
  const Times& times() const { return times_; }

 private:
  void work();
  Mp4Writer writer_;
  Prepare prepare_;
  Times times_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Tensor> queue_;
  bool closing_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace h3
