// h3 probe-media FILE: what a keyframe/reference file holds (media/media_read.h scan_media), as one JSON line.
// Internal: `h3 serve` runs it in a resource-limited child process for every upload (serve/probe.h).
#include <cstdio>
#include <memory>

#include "commands.h"
#include "media/media_read.h"

namespace h3::cli {

Runner add_probe_media(CLI::App& app) {
  auto* cmd = app.add_subcommand("probe-media", "print what a media file holds (JSON); used by h3 serve");
  cmd->group("");  // internal: not listed in --help
  struct Opts {
    std::string path;
    int64_t max_frames = 0, max_samples = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("file", o->path, "image, video or audio file")->required();
  cmd->add_option("--max-frames", o->max_frames, "stop after this many frames at 24 fps (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-samples", o->max_samples, "stop after this many samples at 32 kHz (0: all)")
      ->check(CLI::NonNegativeNumber);
  return [o](const GlobalContext&) -> int {
    const MediaInfo info = scan_media(o->path, 24, 32000, o->max_frames, o->max_samples);
    std::printf("%s\n", media_info_to_json(info).c_str());
    return 0;
  };
}

}  // namespace h3::cli
