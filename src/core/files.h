// Checks on the files the engine is told to read or write, made before any work: an input must be a regular
// file (a FIFO would block the open forever, a folder or device is no checkpoint), and an output path must be
// a regular file or not exist yet (outputs are written to PATH.partial and renamed over PATH, which would
// replace a device node such as /dev/full, a FIFO or a socket with a file).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace h3 {

// Throws h3::Error "WHAT PATH: ..." unless `path` exists and is a regular file (symbolic links followed).
void check_input_file(const std::string& path, const std::string& what);

// Throws h3::Error "WHAT PATH: ..." when `path` is empty, exists and is not a regular file (after following
// symbolic links), or lies in a folder that does not exist or takes no new file (read-only folder or file system:
// PATH.partial is created and removed to see, unless it exists already). Made before a run, so that an output
// that cannot be written is found before the work, not at its end.
void check_output_file(const std::string& path, const std::string& what);

// Throws h3::Error "WHAT PATH: ..." when writing `path` would replace one of `inputs` (the same file, by any name)
// or a file inside an input folder: the output is written while the inputs are still being read.
void check_output_not_input(const std::string& path, const std::vector<std::string>& inputs, const std::string& what);

// The whole of a regular file of at most `max_bytes` (checked before reading); throws naming `what`.
std::string read_text_file_checked(const std::string& path, const std::string& what, size_t max_bytes = 256u << 20);

}  // namespace h3
