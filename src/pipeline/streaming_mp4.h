// The MP4 of one request written while it is decoded: the video VAE hands over finished frames chunk by chunk and a
// worker thread prepares them (`prepare`, e.g. the decoder's output to pixels in [0, 1]) and feeds them to libx264
// while the GPU decodes the next chunk (and the soundtrack); finish() adds the audio and the trailer. The file decodes
// to what Mp4Writer would write from the whole clip at once (libx264's bytes depend on how frames were handed over,
// docs/notes.md). Nothing of the frames' host work stays on the thread that drives the GPU: at 480p it was a third of
// the time between the last denoise step and the file.
//
// The end of the video: libx264 holds its last ~40-70 frames (the look-ahead of the default preset, its B-frames and
// frame threads) until it is told the stream ends, and encoding them was the 1.8 s of "audio and trailer" after the
// 768p decode on the H100 (docs/notes.md). end_video() tells it as soon as the last chunk is in, so the worker
// encodes them while the caller decodes the audio; finish() encodes the audio on the caller's thread meanwhile. Their
// encode itself stays after the decode: only fewer held frames or a faster encoder shorten it.
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
  // No more frames: once the queued ones are encoded the worker flushes libx264 (Mp4Writer::finish_video). finish()
  // calls it when the caller did not.
  void end_video();
  // Adds the soundtrack [channels, 1 or N...] (on this thread, while the worker may still encode video), waits for
  // the worker and finishes the file. Rethrows an error the worker met.
  void finish(const Tensor& wave);

  // Where the writer's time went: on the worker, preparing and encoding frames; on the caller, finish()'s audio, its
  // wait for the worker (what was left of the video) and the rest (the audio's flush, the trailer). `writer` (filled
  // by finish()) is the writer's own split: libx264's delayed frames after end_video() and their time, the audio's
  // flush and the trailer.
  struct Times {
    double prepare = 0, encode = 0;
    double audio = 0, finish_wait = 0, finish_tail = 0;
    Mp4Writer::FinishTimes writer;
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
  bool ended_ = false;      // end_video(): the worker flushes libx264 after the queue
  bool abandoned_ = false;  // the destructor: the worker stops, the file goes
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace h3
